"""The Python client through a cache outage (issue 36, item 2): the server answers a write it cannot make
safely with the cache down 503 `service_unavailable` and Retry-After; the client waits (its RetryPolicy, capped
at max_delay) and sends it again; the cache is back by then and the write goes through, once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.signals import request_finished, request_started
from memory_governance import RetryPolicy

from tests.support.client import Personas
from tests.support.redis_server import RedisServer, redis_as_cache

pytestmark = pytest.mark.django_db(transaction=True)
FACT: dict[str, Any] = {
    "project_id": "project-a",
    "subject_id": "task-proposal-017",
    "predicate": "submission_deadline",
}


@pytest.fixture
def redis_cache(settings: Any) -> Iterator[RedisServer]:
    with redis_as_cache(settings, "client-outage") as server:
        yield server


def test_the_client_retries_a_503_after_retry_after_and_the_write_lands_once(live_server, redis_cache):
    personas = Personas(live_server.url)
    requests: list[str] = []

    def seen(sender: Any, environ: dict[str, Any], **kwargs: Any) -> None:
        requests.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}")

    def cache_back(sender: Any, **kwargs: Any) -> None:
        if redis_cache.process is None:  # the first answer (the 503) is sent: the cache server comes back
            redis_cache.start()

    with personas.client("agent-7", retry=RetryPolicy(attempts=3, backoff=0.0, max_delay=1.0)) as client:
        first = client.assert_fact(
            **FACT,
            value="2026-10-30T17:00+09:00",
            valid_from=datetime(2026, 10, 20, tzinfo=UTC),
            source_ref="task-system:project-a/task-proposal-017",
            source_revision="r17",
        )
        assert client.current(**FACT)["value"] == "2026-10-30T17:00+09:00"  # cached now
        redis_cache.stop()
        request_started.connect(seen, weak=False)
        request_finished.connect(cache_back, weak=False)
        try:
            moved = client.assert_fact(
                **FACT,
                value="2026-11-02T17:00+09:00",
                valid_from=datetime(2026, 10, 22, tzinfo=UTC),
                source_ref="task-system:project-a/task-proposal-017",
                source_revision="r18",
                expected_revision=first["revision"],
            )
        finally:
            request_started.disconnect(seen)
            request_finished.disconnect(cache_back)
        assert requests == ["POST /api/v1/records/", "POST /api/v1/records/"]  # refused once, then accepted
        assert moved["revision"] == 2 and moved["outcome"] != "disputed"
        assert client.current(**FACT)["value"] == "2026-11-02T17:00+09:00"  # no stale cached answer
