"""Large UPDATEs of records move the overview's counters once per statement (stats.update_counted and
update_objects_counted, migration 0012), and the figures still equal the records: after a deletion's
tombstoning, after a batch of supersessions, next to a concurrent writer, and when the statement fails."""

from __future__ import annotations

import contextvars
import threading
from datetime import datetime

import pytest
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from memory_admin.memory import stats
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.batch import assert_facts
from memory_admin.memory.models import MemoryRecord
from tests.support import on_postgres
from tests.support.stats import DAY, agrees, fact

Status = MemoryRecord.Status


@pytest.fixture
def now() -> datetime:
    return timezone.now().replace(hour=13, minute=30, second=0, microsecond=0)


def delta_rows(tenant_id: int) -> int:
    if not on_postgres():
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memory_recordcountdelta WHERE tenant_id = %s", [tenant_id])
        return int(cursor.fetchone()[0])


def by_statement_flag() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('memory.record_counts', true)")
        return cursor.fetchone()[0]


def seed(agent, now: datetime, subjects: int = 6) -> None:
    past = now - 30 * DAY
    for i in range(subjects):
        assert_fact(agent, fact(f"s-{i}", "v1", "1", past))
        assert_fact(agent, fact(f"s-{i}", "v2", "2", past + DAY, expected_revision=1))  # one superseded each


def test_tombstoning_many_records_counts_them_in_one_grouped_statement(agent, now):
    seed(agent, now)
    tenant = agent.tenant_id
    stats.fold_counts(tenant)
    before = delta_rows(tenant)
    with transaction.atomic():
        moved = stats.update_counted(
            MemoryRecord.objects.filter(tenant_id=tenant, subject_id__in=["s-0", "s-1", "s-2"]),
            tombstoned_at=now,
            status=Status.DELETED,
            is_head=False,
        )
        assert moved == 6  # 3 subjects x (current + superseded)
        if on_postgres():
            assert by_statement_flag() == ""  # reset within the transaction: later updates count per row
    figures = agrees(tenant, now)
    assert figures.by_status["deleted"] == 6 and figures.by_status["accepted"] == 3
    if on_postgres():
        # Keys moved: (accepted, ...) -> deleted and (superseded, ...) -> deleted, each one grouped row per side.
        # The row trigger would have written two rows per record (12).
        assert delta_rows(tenant) - before == 3


def test_after_a_counted_update_a_plain_update_in_the_same_transaction_is_counted(agent, now):
    seed(agent, now, subjects=3)
    tenant = agent.tenant_id
    with transaction.atomic():
        stats.update_counted(MemoryRecord.objects.filter(tenant_id=tenant, subject_id="s-0"), status=Status.EXPIRED)
        MemoryRecord.objects.filter(tenant_id=tenant, subject_id="s-1").update(status=Status.EXCLUDED)
    figures = agrees(tenant, now)
    assert figures.by_status["expired"] == 2 and figures.by_status["excluded"] == 2


def test_an_update_that_moves_no_key_is_a_plain_update(agent, now):
    seed(agent, now, subjects=2)
    before = delta_rows(agent.tenant_id)
    assert stats.update_counted(MemoryRecord.objects.filter(tenant_id=agent.tenant_id), status_reason="checked") == 4
    assert delta_rows(agent.tenant_id) == before
    agrees(agent.tenant_id, now)


def test_a_condition_that_matches_nothing_updates_nothing(agent, now):
    seed(agent, now, subjects=1)
    assert stats.update_counted(MemoryRecord.objects.filter(pk__in=[]), status=Status.EXPIRED) == 0
    assert stats.update_counted(MemoryRecord.objects.filter(subject_id="nobody"), status=Status.EXPIRED) == 0
    assert stats.update_objects_counted([], ["status"]) == 0
    agrees(agent.tenant_id, now)


def test_expressions_are_refused(agent, now):
    seed(agent, now, subjects=1)
    with pytest.raises(TypeError, match="plain values"):
        stats.update_counted(MemoryRecord.objects.filter(tenant_id=agent.tenant_id), recheck_after=F("valid_from"))
    with pytest.raises(ValueError, match="no column 'tenant'"):  # attnames only, as the statement names columns
        stats.update_counted(MemoryRecord.objects.filter(tenant_id=agent.tenant_id), tenant=1)
    agrees(agent.tenant_id, now)


@pytest.mark.postgres_only(reason="the counted statement and its setting exist on PostgreSQL only")
def test_a_failing_counted_update_changes_nothing_and_leaves_no_setting_behind(agent, now):
    seed(agent, now, subjects=2)
    tenant = agent.tenant_id
    with transaction.atomic():
        with pytest.raises((DataError, IntegrityError)):
            # Two heads for one fact: the unique index refuses the statement.
            stats.update_counted(
                MemoryRecord.objects.filter(tenant_id=tenant, subject_id="s-0"), is_head=True, status=Status.EXPIRED
            )
        assert by_statement_flag() in (None, "")  # rolled back with the failed statement's savepoint
        MemoryRecord.objects.filter(tenant_id=tenant, subject_id="s-1").update(status=Status.EXPIRED)
    figures = agrees(tenant, now)  # the plain update after it was counted by the row trigger
    assert figures.by_status["expired"] == 2 and figures.by_status["accepted"] == 1


def test_a_batch_of_supersessions_keeps_the_counts(agent, now):
    past = now - 30 * DAY
    tenant = agent.tenant_id
    assert_facts(agent, [fact(f"b-{i}", "v1", "1", past) for i in range(20)], now=now)
    stats.fold_counts(tenant)
    before = delta_rows(tenant)
    result = assert_facts(
        agent, [fact(f"b-{i}", "v2", "2", past + DAY, expected_revision=1) for i in range(20)], now=now
    )
    assert [item.status for item in result.items] == [201] * 20
    figures = agrees(tenant, now)
    assert figures.by_status["accepted"] == 20 and figures.by_status["superseded"] == 20
    if on_postgres():
        # The new heads' INSERT (one grouped row) and the old heads' UPDATE (one row per side): not 2 per record.
        assert delta_rows(tenant) - before <= 4


@pytest.mark.postgres_only(reason="row locks between two connections")
@pytest.mark.django_db(transaction=True)
def test_a_concurrent_writer_is_waited_for_and_counted_from_its_committed_values(agent, now):
    """Another transaction changes a record's status and holds its lock; the counted update waits for it and
    moves the record from the status that writer committed, not the one its snapshot began with."""
    seed(agent, now, subjects=2)
    tenant = agent.tenant_id
    target = MemoryRecord.objects.get(tenant_id=tenant, subject_id="s-0", is_head=True)
    locked, release, done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                MemoryRecord.objects.filter(pk=target.pk).update(status=Status.EXCLUDED)
                locked.set()
                release.wait(10)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    def deleter() -> None:
        try:
            with transaction.atomic():
                stats.update_counted(
                    MemoryRecord.objects.filter(tenant_id=tenant, subject_id="s-0"),
                    tombstoned_at=now,
                    status=Status.DELETED,
                    is_head=False,
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()
            done.set()

    first = threading.Thread(target=contextvars.copy_context().run, args=(writer,))
    first.start()
    assert locked.wait(10)
    second = threading.Thread(target=contextvars.copy_context().run, args=(deleter,))
    second.start()
    assert not done.wait(0.5)  # waiting on the writer's row lock
    release.set()
    first.join(10)
    second.join(10)
    assert not errors, errors
    figures = agrees(tenant, now)
    assert figures.by_status["deleted"] == 2 and figures.by_status["excluded"] == 0
