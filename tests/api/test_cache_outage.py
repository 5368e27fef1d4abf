"""The cache server down (issue 36, item 2): the API keeps answering, never 500.

A real redis-server of the test's own (tests/support/redis_server.py) is the cache; the test stops it and
starts it again. While it is down: the throttles let requests through uncounted (fail open, counted in
lib.outages), a fact's cached answer is a miss and the answer is read from the database, and a write that
would have to evict a cached answer is refused with 503 `service_unavailable` and Retry-After, nothing of it
applied. Once it is back, the throttles count again and the write goes through."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import RequestFactory
from rest_framework.test import APIClient

from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import issue_token
from memory_admin.lib import outages
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from memory_admin.urls import server_error
from tests.support import DEADLINE, at, body, deadline
from tests.support.redis_server import RedisServer, redis_as_cache

pytestmark = pytest.mark.django_db
CURRENT = "/api/v1/facts/current/"
FACT = {key: DEADLINE[key] for key in ("project_id", "subject_id", "predicate")}
HIGH = "100000/min"


@pytest.fixture
def redis_cache(settings: Any) -> Iterator[RedisServer]:
    with redis_as_cache(settings, "outage") as server:
        yield server


def _limits(settings: Any, **rates: str) -> None:
    rates_now = dict(django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])  # type: ignore[call-overload]
    base = {scope: HIGH for scope in rates_now}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**base, **rates}}


def _client(principal: Principal) -> APIClient:
    client = APIClient(REMOTE_ADDR=f"2001:db8::{secrets.token_hex(2)}")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(principal)}")
    return client


def test_a_cache_outage_degrades_reads_refuses_unsafe_writes_with_503_and_throttles_count_again_after(
    settings, redis_cache, agent
):
    _limits(settings, reads="3/min")
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    client = _client(agent)
    assert client.get(CURRENT, FACT).json()["value"] == "2026-10-30T17:00+09:00"  # fills the answer cache (1)

    redis_cache.stop()
    failures = outages.cache_failures()
    # Down: five reads against a budget of three, every one answered from the database.
    for _ in range(5):
        response = client.get(CURRENT, FACT)
        assert response.status_code == 200, response.content
        assert response.json()["value"] == "2026-10-30T17:00+09:00"
    assert outages.cache_failures() > failures  # each uncounted request and each missed read was counted

    # A write superseding the cached fact cannot evict its answer: 503, Retry-After, nothing applied.
    moved = body(deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))
    refused = client.post("/api/v1/records/", moved, format="json")
    assert refused.status_code == 503, refused.content
    assert refused.json()["code"] == "service_unavailable" and set(refused.json()) == {"code", "detail"}
    assert int(refused["Retry-After"]) >= 1
    assert MemoryRecord.objects.filter(subject_id=FACT["subject_id"], predicate=FACT["predicate"]).count() == 1

    redis_cache.start()  # back, empty (nothing persisted): the throttles count from zero again
    accepted = client.post("/api/v1/records/", moved, format="json")
    assert accepted.status_code == 201, accepted.content
    answers = [client.get(CURRENT, FACT) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json()["value"] == "2026-11-02T17:00+09:00"
    assert cache.get("no-such-key") is None  # the cache answers again


def test_any_other_failure_on_an_unreachable_cache_is_a_503_with_retry_after_not_a_500(redis_cache):
    redis_cache.stop()
    factory = RequestFactory()
    for path, content_type in (("/api/v1/records/", "application/json"), ("/overview/", "text/html")):
        try:
            cache.get("anything")
        except outages.CACHE_ERRORS:
            response = server_error(factory.get(path))  # Django's 500 handler, called while handling the error
        else:
            pytest.fail("the stopped cache server answered")
        assert response.status_code == 503
        assert response["Content-Type"].startswith(content_type)
        assert int(response["Retry-After"]) >= 1
    # A real failure stays a 500.
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        assert server_error(factory.get("/api/v1/records/")).status_code == 500
