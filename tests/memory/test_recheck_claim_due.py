"""claim_due's promise at scale (issue 16): oldest first, a claim ends when the recheck lands, two sweeps never
share a record, and on PostgreSQL a claim is a row of `memory_recheckclaim`, never a write to the record."""

from __future__ import annotations

import contextvars
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import MemoryRecord, RecheckAttempt
from memory_admin.memory.rechecks import CLAIM_LOCK, claim_due, record_recheck


def due_records(agent, count: int, prefix: str = "claim") -> list[MemoryRecord]:
    """`count` current records, due oldest first in the order made (recheck_after a second apart)."""
    past = timezone.now() - timedelta(days=3)
    made = []
    for i in range(count):
        record = assert_fact(
            agent,
            Assertion(
                project_id="project-a",
                subject_id=f"{prefix}-{i:03d}",
                predicate="submission_deadline",
                value=f"2026-11-{(i % 27) + 1:02d}",
                valid_from=past,
                source_canonical_ref=f"task-system:project-a/{prefix}-{i:03d}",
                source_revision="r1",
            ),
            now=past,
            verified_at=past,
        ).record
        made.append(record)
    # assert_fact leaves the recheck date empty without a policy: schedule them, oldest first.
    for i, record in enumerate(made):
        MemoryRecord.objects.filter(pk=record.pk).update(recheck_after=past + timedelta(seconds=i))
    return made


def claims_table() -> dict[int, int]:
    """record id → tenant id of the claim rows the current tenant sees (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT record_id, tenant_id FROM memory_recheckclaim")
        return dict(cursor.fetchall())


def test_claims_come_oldest_first_and_each_once(agent):
    records = due_records(agent, 7)
    assert claim_due(limit=3) == [r.pk for r in records[:3]]
    assert claim_due(limit=3) == [r.pk for r in records[3:6]]
    assert claim_due(limit=3) == [records[6].pk]
    assert claim_due() == []
    assert claim_due(timezone.now() + timedelta(minutes=16), limit=0) == []


def test_a_landed_recheck_ends_the_claim_before_the_lease(agent):
    """Verification moves the recheck date and ends the claim: once due again (here: made due by hand, as an
    owner's change of the schedule would), the record is claimed at once, not after CLAIM_LEASE."""
    first, second = due_records(agent, 2)
    assert claim_due() == [first.pk, second.pk]
    record_recheck(first, outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED, trigger=RecheckAttempt.Trigger.SWEEP)
    first.refresh_from_db()
    assert first.recheck_claimed_at is None and first.last_verified_at is not None
    MemoryRecord.objects.filter(pk=first.pk).update(recheck_after=timezone.now() - timedelta(minutes=1))
    assert claim_due() == [first.pk]  # `second` stays claimed: no recheck of it landed
    assert claim_due() == []


def test_a_failed_recheck_keeps_the_claim_until_the_lease_ends(agent):
    (record,) = due_records(agent, 1)
    assert claim_due() == [record.pk]
    record_recheck(record, outcome=RecheckAttempt.Result.SOURCE_UNAVAILABLE, trigger=RecheckAttempt.Trigger.SWEEP)
    assert claim_due() == []
    assert claim_due(timezone.now() + timedelta(minutes=16)) == [record.pk]


@pytest.mark.postgres_only(reason="the claims table memory_recheckclaim and the row versions (xmin) of PostgreSQL")
def test_a_claim_is_a_claims_row_and_never_writes_the_record(agent):
    records = due_records(agent, 4)

    def versions() -> dict[int, str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, xmin::text FROM memory_memoryrecord WHERE id = ANY(%s)", [[r.pk for r in records]]
            )
            return dict(cursor.fetchall())

    before = versions()
    assert claim_due(limit=3) == [r.pk for r in records[:3]]
    assert versions() == before  # no row lock, no stamp: the records were not written
    assert claims_table() == {r.pk: r.tenant_id for r in records[:3]}
    assert all(r.recheck_claimed_at is None for r in MemoryRecord.objects.filter(pk__in=[r.pk for r in records]))

    record_recheck(records[0], outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED, trigger=RecheckAttempt.Trigger.SWEEP)
    assert set(claims_table()) == {records[1].pk, records[2].pk}

    # An expired claim is replaced by the new one, not added next to it.
    later = timezone.now() + timedelta(minutes=16)
    assert claim_due(later) == [r.pk for r in records[1:]]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), min(claimed_at) FROM memory_recheckclaim")
        assert cursor.fetchone() == (3, later)


@pytest.mark.postgres_only(reason="row-level security on the claims table (tenant policies exist on PostgreSQL)")
def test_a_tenant_claims_only_its_own_records_and_sees_only_its_claims(agent, outsider):
    ours = due_records(agent, 2)
    with tenant_context(outsider.tenant_pk):
        theirs = due_records(outsider, 2, prefix="globex")
        assert claim_due() == [r.pk for r in theirs]
        assert set(claims_table()) == {r.pk for r in theirs}
    assert claim_due() == [r.pk for r in ours]
    assert set(claims_table()) == {r.pk for r in ours}


@pytest.mark.postgres_only(reason="two sessions at once: claim_due's advisory lock between them")
@pytest.mark.django_db(transaction=True)
def test_a_sweep_waits_for_a_concurrent_claim_then_takes_the_next_records(agent):
    """Sweep A claims and has not committed yet when sweep B starts: B waits for A's commit, then takes the
    next records, not A's (without the wait, B would take A's records and fail on the claims table's key)."""
    records = due_records(agent, 6)
    a_claimed: list[int] = []
    b_claimed: list[int] = []
    b_error: list[BaseException] = []
    b_started = threading.Event()

    def sweep_b() -> None:
        try:
            b_started.set()
            b_claimed.extend(claim_due(limit=3))
        except BaseException as exc:  # reported by the test thread
            b_error.append(exc)
        finally:
            connection.close()

    b = threading.Thread(target=contextvars.copy_context().run, args=(sweep_b,))
    with transaction.atomic():
        a_claimed.extend(claim_due(limit=3))
        b.start()
        b_started.wait(10)
        deadline = time.monotonic() + 10
        with connection.cursor() as cursor:  # until B waits on A's claim lock
            while time.monotonic() < deadline:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND classid = %s AND objid = 0 AND objsubid = 2",
                    [CLAIM_LOCK],
                )
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("sweep B never waited for sweep A's claim")
    b.join(30)
    assert not b_error, b_error
    assert a_claimed == [r.pk for r in records[:3]]
    assert b_claimed == [r.pk for r in records[3:]]
