"""The overview's counts checked against the records themselves (memory/stats.py): `agrees` compares the maintained
(or exact) figures with figures computed from each record by the product's freshness rule."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from memory_admin.memory import stats
from memory_admin.memory.actions import Assertion
from memory_admin.memory.models import MemoryRecord, RecordHide
from memory_admin.memory.reads import freshness_of
from tests.support import on_postgres

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def fact(subject: str, value: str, revision: str, valid_from: datetime, **kwargs) -> Assertion:
    return Assertion(
        project_id="project-a",
        subject_id=subject,
        predicate="deadline",
        value=value,
        valid_from=valid_from,
        source_canonical_ref=f"crm:{subject}",
        source_revision=revision,
        **kwargs,
    )


def by_hand(tenant_id: int, now: datetime) -> tuple[dict[str, int], dict[str, int], int]:
    """The figures computed from each record with the freshness rule, in Python."""
    records = list(MemoryRecord.all_objects.filter(tenant_id=tenant_id))  # tombstoned ones too
    # A deletion's rule hides records until their purge: they count as deleted, whatever their status says.
    rules = list(RecordHide.objects.filter(tenant_id=tenant_id))

    def status(r: MemoryRecord) -> str:
        hidden = any(
            h.project_id == r.project_id
            and h.first_id <= r.pk <= h.last_id
            and (r.subject_id == h.subject_id if h.subject_id else r.predicate == h.predicate)
            for h in rules
        )
        return MemoryRecord.Status.DELETED if hidden else r.status

    by_status = Counter(status(r) for r in records)
    buckets: Counter[str] = Counter()
    overdue = 0
    for r in records:
        if status(r) != MemoryRecord.Status.ACCEPTED:
            continue
        overdue += r.recheck_after is not None and r.recheck_after <= now
        freshness = freshness_of(r, now)
        if freshness == "never_verified":
            buckets["never"] += 1
        elif freshness == "recheck_due":
            buckets["overdue"] += 1
        elif r.recheck_after is None:
            buckets["unscheduled"] += 1
        elif r.recheck_after <= now + DAY:
            buckets["due_1d"] += 1
        elif r.recheck_after <= now + 7 * DAY:
            buckets["due_7d"] += 1
        else:
            buckets["due_later"] += 1
    return (
        {s: by_status[s] for s in MemoryRecord.Status.values},
        {key: buckets[key] for key, _ in stats.BUCKETS},
        overdue,
    )


def agrees(tenant_id: int, now: datetime) -> stats.RecordStats:
    figures = stats.record_stats(tenant_id, now)
    assert (figures.by_status, figures.freshness, figures.overdue) == by_hand(tenant_id, now)
    assert figures.method == ("maintained" if on_postgres() else "exact")
    exact = stats.exact_record_stats(tenant_id, now)
    assert (exact.by_status, exact.freshness, exact.overdue) == (figures.by_status, figures.freshness, figures.overdue)
    return figures
