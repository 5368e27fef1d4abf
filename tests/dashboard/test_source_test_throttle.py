"""The dashboard's "test this source" spends the API's `source_test` budget (memory_admin.lib.throttling).

Each test sets tiny limits through the `settings` fixture and posts from an address of its own (as
tests/api/test_throttling.py), so no count it leaves in the cache meets another test.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from rest_framework.test import APIClient

from memory_admin.accounts.services import issue_token
from memory_admin.memory.models import FieldPolicy
from tests.support.canonical_source import http_json_source

HIGH = "100000/min"


def _address() -> str:
    return f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}"


def _limits(settings: Any, **rates: str) -> None:
    """Every scope high except the ones given."""
    rates_now = dict(django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])  # type: ignore[call-overload]
    base = {scope: HIGH for scope in rates_now}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**base, **rates}}


def _client(principal: Any, address: str) -> Client:
    client = Client(REMOTE_ADDR=address)
    client.force_login(principal)
    return client


@pytest.fixture
def policy(admin) -> FieldPolicy:
    # Nothing listens on port 9: an allowed test answers at once (source unavailable), never hangs.
    return FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", canonical_source=http_json_source("http://127.0.0.1:9")
    )


def _post(client: Client, policy: FieldPolicy, **headers: str) -> Any:
    return client.post(
        f"/policies/{policy.pk}/test/", {"subject_id": "task-1", "project_id": "project-a"}, headers=headers
    )


def _assert_throttled(response: Any) -> None:
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    html = response.content.decode()
    assert "Too many source tests" in html and "Nothing was fetched" in html


@pytest.mark.parametrize("htmx", [False, True])
def test_the_page_is_throttled_per_session(settings, admin, policy, htmx):
    _limits(settings, source_test="1/min")
    client = _client(admin, _address())
    headers = {"HX-Request": "true"} if htmx else {}
    assert _post(client, policy, **headers).status_code == 200
    _assert_throttled(_post(client, policy, **headers))


def test_the_page_is_throttled_per_address(settings, admin, policy):
    _limits(settings, source_test_by_address="1/min")
    address = _address()
    assert _post(_client(admin, address), policy).status_code == 200
    _assert_throttled(_post(_client(admin, address), policy))  # a new session from the same address


def test_the_page_and_the_api_share_one_budget(settings, admin, policy):
    _limits(settings, source_test_by_address="1/min")
    address = _address()
    client = _client(admin, address)
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(admin)}")
    url = f"/api/v1/field-policies/{policy.pk}/test/"
    assert api.post(url, {"subject_id": "task-1"}, format="json").status_code == 200
    _assert_throttled(_post(client, policy))


def test_other_pages_are_not_counted(settings, admin, policy):
    _limits(settings, source_test="1/min", source_test_by_address="1/min")
    client = _client(admin, _address())
    for _ in range(3):
        assert client.get(f"/policies/{policy.pk}/").status_code == 200
    assert _post(client, policy).status_code == 200
