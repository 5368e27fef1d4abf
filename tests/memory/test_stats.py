"""The overview's counts (memory/stats.py) equal exact counts after every kind of change.

On PostgreSQL they are maintained by triggers (migration 0009) and read from counters; on SQLite they are
counted exactly. Either way each figure is checked against the records themselves, one by one, with the
product's freshness rule (reads.freshness_of).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from deletion.models import StoreProgress
from deletion.tasks import purge_store
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory import stats
from memory_admin.memory.actions import assert_fact, exclude_record, expire_record
from memory_admin.memory.models import MemoryRecord, RecordHide
from tests.support import on_postgres
from tests.support.stats import DAY, HOUR, agrees, fact


@pytest.fixture
def now() -> datetime:
    # Mid-day, so that edges (now, now + 1 day, now + 7 days) fall inside days, not on midnight.
    return timezone.now().replace(hour=13, minute=30, second=0, microsecond=0)


def test_counts_agree_with_the_records_after_asserts_supersessions_expiry_and_exclusion(agent, owner, outsider, now):
    tenant = agent.tenant_id
    empty = agrees(tenant, now)
    assert sum(empty.by_status.values()) == 0
    past = now - 30 * DAY
    for i in range(12):
        assert_fact(agent, fact(f"s-{i}", f"v{i}", "1", past))
    for i in range(4):  # supersessions (compare-and-swap)
        assert_fact(agent, fact(f"s-{i}", f"v{i}b", "2", past + DAY, expected_revision=1))
    assert_fact(agent, fact("s-5", "late", "0", past - DAY))  # an older revision imported late: history
    with tenant_context(outsider.tenant_id):  # another tenant's record counts there only
        assert_fact(outsider, fact("s-0", "theirs", "1", past))
        assert stats.record_stats(outsider.tenant_id, now).by_status["accepted"] == 1
    figures = agrees(tenant, now)
    assert figures.by_status["accepted"] == 12 and figures.by_status["superseded"] >= 4

    heads = {r.subject_id: r for r in MemoryRecord.objects.filter(tenant_id=tenant, is_head=True)}
    exclude_record(owner, heads["s-6"].memory_id, "wrong person")
    expire_record(owner, heads["s-7"].memory_id, "no longer relevant")
    figures = agrees(tenant, now)
    assert figures.by_status["excluded"] == 1 and figures.by_status["accepted"] == 10

    # Verified at various times, each with its own recheck_after, on both sides of every edge (and on them).
    offsets = [-HOUR, timedelta(0), HOUR, DAY, DAY + HOUR, 7 * DAY, 7 * DAY + HOUR, 30 * DAY, -DAY, 3 * DAY]
    accepted = list(MemoryRecord.objects.filter(tenant_id=tenant, status="accepted").order_by("id"))
    for record, offset in zip(accepted, offsets, strict=False):
        MemoryRecord.objects.filter(pk=record.pk).update(last_verified_at=past, recheck_after=now + offset)
    MemoryRecord.objects.filter(pk=accepted[-1].pk).update(last_verified_at=past, recheck_after=None)
    MemoryRecord.objects.filter(pk=accepted[-2].pk).update(last_verified_at=None, recheck_after=now - HOUR)
    figures = agrees(tenant, now)
    assert all(figures.freshness[key] for key in ("overdue", "due_1d", "due_7d", "due_later", "unscheduled"))
    assert figures.overdue > figures.freshness["overdue"]  # the never-verified one is due too
    # The same counters answer for other instants: the buckets move with the clock.
    for moment in (now - 2 * DAY, now + HOUR, now + 6 * DAY + 23 * HOUR, now + 40 * DAY, now.replace(hour=0)):
        agrees(tenant, moment)
    # A bulk update and a bulk delete (as the sweep and the purge make them) are counted too.
    MemoryRecord.objects.filter(tenant_id=tenant, status="superseded").update(recheck_after=now + 2 * DAY)
    MemoryRecord.objects.filter(tenant_id=tenant, status="expired").delete()
    agrees(tenant, now)


@pytest.mark.postgres_only(reason="the counters and their fold exist on PostgreSQL only")
def test_folding_the_deltas_keeps_the_figures(agent, now):
    past = now - 30 * DAY
    for i in range(5):
        assert_fact(agent, fact(f"s-{i}", "v", "1", past))
    assert_fact(agent, fact("s-0", "w", "2", past + DAY, expected_revision=1))
    before = agrees(agent.tenant_id, now)
    assert stats.fold_counts(agent.tenant_id) > 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memory_recordcountdelta WHERE tenant_id = %s", [agent.tenant_id])
        assert cursor.fetchone()[0] == 0
    assert agrees(agent.tenant_id, now) == before
    assert stats.fold_counts(agent.tenant_id) == 0


def test_counts_agree_after_a_subject_is_deleted_and_purged(api, agent, compliance, now):
    past = now - 30 * DAY
    for i in range(3):
        assert_fact(agent, fact("doomed", f"v{i}", str(i + 1), past + i * DAY, expected_revision=i or None))
        assert_fact(agent, fact(f"kept-{i}", "v", "1", past))
    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": "project-a", "scope": {"subject_id": "doomed"}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202, response.content
    figures = agrees(agent.tenant_id, now)  # hidden by the request's rule, not yet purged
    assert figures.by_status["accepted"] == 3 and figures.by_status["deleted"] == 3
    assert RecordHide.objects.count() == 1 and not MemoryRecord.all_objects.filter(tombstoned_at__isnull=False)
    if on_postgres():  # counted again from the rows: the same figures
        stats.recount(agent.tenant_id)
    assert agrees(agent.tenant_id, now).by_status == figures.by_status
    for progress in StoreProgress.objects.filter(request__public_id=response.json()["id"]):
        purge_store.apply(args=[progress.pk])
    figures = agrees(agent.tenant_id, now)
    assert not MemoryRecord.objects.filter(subject_id="doomed").exists()
    assert sum(figures.by_status.values()) == 3


def test_the_overview_shows_the_counts(agent, owner):
    now = timezone.now()
    for i in range(3):
        assert_fact(agent, fact(f"s-{i}", "v", "1", now - DAY))
    assert_fact(agent, fact("s-0", "w", "2", now - HOUR, expected_revision=1))
    MemoryRecord.objects.filter(subject_id="s-1").update(last_verified_at=now - DAY, recheck_after=now - HOUR)
    client = Client()
    client.force_login(owner)
    page = client.get("/")
    assert page.status_code == 200
    by_status = {tile.badge: tile.n for tile in page.context["tiles"] if tile.badge}
    assert by_status["accepted"] == 3 and by_status["superseded"] == 1
    assert page.context["overdue"] == 1
    assert {band.key: band.n for band in page.context["bands"]} == {"fresh": 0, "soon": 0, "due": 1, "never": 2}
