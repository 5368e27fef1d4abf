"""API throttles (issue 12, part 2): per principal+token and per client address, one scope per kind of work
(reads, writes, search, "test this source"), 429 `throttled` with Retry-After, limits from settings.

Each test sets tiny limits through the `settings` fixture (DRF reloads its settings on the change, and the
throttles read the rates on every request) and sends from an address of its own, so no count it leaves in
the cache meets another test."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import issue_token
from memory_admin.lib.throttling import client_address, parse_rate

RECORDS = "/api/v1/records/?project_id=project-a"
HIGH = "100000/min"


def _address() -> str:
    return f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}"


def _limits(settings: Any, **rates: str) -> None:
    """Every scope high except the ones given (`reads="2/min"`, `reads_by_address="3/min"`)."""
    base = {scope: HIGH for scope in _rates()}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**base, **rates}}


def _rates() -> dict[str, str]:
    return dict(django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])  # type: ignore[call-overload]


def _client(principal: Principal, address: str, token: str | None = None) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token or issue_token(principal)}")
    return client


def _assert_throttled(response: Any) -> None:
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["code"] == "throttled" and "throttled" in body["detail"].lower()
    assert set(body) == {"code", "detail"}
    # Retry-After survives the JSON error handler: whole seconds until the window ends.
    assert 1 <= int(response["Retry-After"]) <= 60


def test_reads_answer_429_with_retry_after_and_the_error_shape(settings, agent):
    _limits(settings, reads="2/min")
    client = _client(agent, _address())
    assert client.get(RECORDS).status_code == 200
    assert client.get(RECORDS).status_code == 200
    _assert_throttled(client.get(RECORDS))


def test_writes_have_their_own_budget(settings, agent):
    _limits(settings, writes="1/min")
    client = _client(agent, _address())
    first = client.post("/api/v1/events/", {}, format="json")
    assert first.status_code == 400  # invalid, but it counts
    _assert_throttled(client.post("/api/v1/events/", {}, format="json"))
    assert client.get(RECORDS).status_code == 200  # reads are another scope


def test_search_has_its_own_budget(settings, agent):
    _limits(settings, search="1/min")
    client = _client(agent, _address())
    assert client.get("/api/v1/search/?q=deadline").status_code != 429
    _assert_throttled(client.get("/api/v1/search/?q=deadline"))
    assert client.get(RECORDS).status_code == 200


def test_source_test_has_its_own_budget(settings, admin):
    _limits(settings, source_test="1/min")
    client = _client(admin, _address())
    assert client.post("/api/v1/field-policies/999999/test/", {"subject_id": "x"}, format="json").status_code == 404
    _assert_throttled(client.post("/api/v1/field-policies/999999/test/", {"subject_id": "x"}, format="json"))
    # Other writes of the same admin are not "test this source".
    assert client.post("/api/v1/field-policies/", {}, format="json").status_code == 400


def test_per_token_another_token_and_another_agent_are_not_affected(settings, agent, other_agent):
    _limits(settings, reads="1/min")
    address = _address()
    first = _client(agent, address)
    assert first.get(RECORDS).status_code == 200
    _assert_throttled(first.get(RECORDS))
    # The same agent's second token has a budget of its own (per principal and token) ...
    assert _client(agent, address).get(RECORDS).status_code == 200
    # ... and so has another agent, from the same address.
    assert _client(other_agent, address).get(RECORDS).status_code == 200


def test_per_address_whoever_asks(settings, agent, other_agent):
    _limits(settings, reads_by_address="2/min")
    address = _address()
    assert _client(agent, address).get(RECORDS).status_code == 200
    assert _client(other_agent, address).get(RECORDS).status_code == 200
    _assert_throttled(_client(agent, address).get(RECORDS))
    _assert_throttled(_client(other_agent, address).get(RECORDS))
    assert _client(agent, _address()).get(RECORDS).status_code == 200  # another address


def test_per_address_also_covers_unauthenticated_requests(settings):
    _limits(settings, reads_by_address="1/min")
    client = APIClient(REMOTE_ADDR=_address())  # the schema is public
    assert client.get("/api/v1/schema/?format=json").status_code == 200
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 429 and int(response["Retry-After"]) >= 1
    assert json.loads(response.content)["code"] == "throttled"


def test_a_forged_forwarded_for_header_does_not_buy_a_new_address(settings, agent):
    _limits(settings, reads_by_address="2/min")
    client = _client(agent, _address())
    for n in range(2):
        assert client.get(RECORDS, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code == 200
    _assert_throttled(client.get(RECORDS, HTTP_X_FORWARDED_FOR="203.0.113.99"))


def test_behind_trusted_proxies_the_forwarded_address_is_used(settings, rf):
    settings.TRUSTED_PROXY_COUNT = 1
    request = rf.get("/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="198.51.100.7, 203.0.113.5")
    assert client_address(request) == "203.0.113.5"  # what our one proxy saw; the left part is the client's say
    settings.TRUSTED_PROXY_COUNT = 2
    assert client_address(request) == "198.51.100.7"
    settings.TRUSTED_PROXY_COUNT = 0
    assert client_address(request) == "10.0.0.2"


def test_every_scope_has_a_default_well_above_a_test_run(settings):
    rates = _rates()
    for scope in ("reads", "writes", "search", "source_test"):
        assert parse_rate(rates[scope])[0] >= 30 and parse_rate(rates[f"{scope}_by_address"])[0] >= 100


def _settings_with(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "r = settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']; print(r['reads'], r['search_by_address'])"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memory_admin.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_limits_come_from_the_environment_and_bad_ones_fail_loudly():
    done = _settings_with({"API_THROTTLE_READS": "7/min", "API_THROTTLE_SEARCH_PER_ADDRESS": "9/hour"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7/min", "9/hour"]
    bad = _settings_with({"API_THROTTLE_WRITES": "lots"})
    assert bad.returncode != 0 and "API_THROTTLE" not in bad.stdout and "writes='lots'" in bad.stderr


@pytest.mark.parametrize("rate", ["0/min", "5", "5/fortnight"])
def test_malformed_rates_are_refused(rate):
    done = _settings_with({"API_THROTTLE_READS": rate})
    assert done.returncode != 0 and "throttle rate reads" in done.stderr
