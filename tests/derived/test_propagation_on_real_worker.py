"""Stale propagation end to end: the API changes a record, a real worker updates the vector index,
and the cache (Redis under `make test`) no longer answers with the old value."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from memory_admin.derived.caches import fact_key
from memory_admin.derived.models import Invalidation, Summary
from memory_admin.derived.vectors import get_index
from tests.support import ARTIFACTS, DEADLINE, at, body, deadline
from tests.support.celery_worker import require_real_broker, running_worker, wait_until


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_superseding_through_the_api_reaches_every_store(api, agent, other_agent):
    require_real_broker()
    client = api(agent)
    with running_worker(ARTIFACTS / "celery-propagation-worker.log") as worker:
        old = client.post(
            "/api/v1/records/", body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))), format="json"
        ).json()
        index = get_index()

        def usable(memory_id: str) -> bool | None:
            entries = index.find(tenant_id=agent.tenant_id, object_ids=[memory_id])
            return entries[0].usable if entries else None

        assert wait_until(lambda: usable(old["memory_id"]) is True, timeout=60), "the worker never embedded the record"
        summary = client.post(
            "/api/v1/summaries/",
            {
                "project_id": "project-a",
                "text": "Due Oct 30",
                "kind": "facts_digest",
                "derived_from": [{"memory_id": old["memory_id"], "revision": 1}],
            },
            format="json",
        ).json()
        api(other_agent).post(
            "/api/v1/context-loads/",
            {
                "session_id": "s-9",
                "memories": [{"memory_id": old["memory_id"], "revision": 1}],
                "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
            },
            format="json",
        )
        assert client.get("/api/v1/facts/current/", DEADLINE).json()["value"] == "2026-10-30T17:00+09:00"
        key = fact_key(agent.tenant_id, "project-a", DEADLINE["subject_id"], DEADLINE["predicate"])
        assert cache.get(key) is not None

        new = client.post(
            "/api/v1/records/",
            body(deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)),
            format="json",
        ).json()

        assert cache.get(key) is None
        assert wait_until(lambda: usable(old["memory_id"]) is False and usable(new["memory_id"]) is True, timeout=60)
        # The digest kind has a regenerator: the worker rebuilt it from the current base only.
        assert wait_until(lambda: Summary.objects.filter(replaces__public_id=summary["id"]).exists(), timeout=60)
        assert worker.poll() is None, "the worker died"
    regenerated = Summary.objects.get(replaces__public_id=summary["id"])
    assert "2026-11-02T17:00+09:00" in regenerated.text and regenerated.status == "current"
    assert Summary.objects.get(public_id=summary["id"]).status == "withdrawn"
    assert Invalidation.objects.filter(record__memory_id=old["memory_id"], acknowledged_at__isnull=True).count() == 1
    hits = client.get("/api/v1/search/", {"project_id": "project-a", "q": "submission deadline"}).json()["results"]
    assert [h["memory_id"] for h in hits][:1] == [new["memory_id"]]
    assert old["memory_id"] not in [h["memory_id"] for h in hits]
