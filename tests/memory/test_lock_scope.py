"""Locking a dispute, a record or a planned action for a change locks that row only, never its project's row.

Found by `make soak` (issue 36, item 2): an owner resolving a dispute locked the dispute FOR UPDATE with its
project joined (select_related), which locked the project's row too, then waited for the tenant's audit chain head.
Meanwhile an agent's write of another fact of the tenant held that head and, at COMMIT, checked its deferred
foreign key to the same project (`SELECT 1 FROM memory_project ... FOR KEY SHARE`), which FOR UPDATE blocks:
PostgreSQL broke the deadlock by failing one of them, answered 503 outside any outage. Here the change's lock is
taken in this test's transaction and the commit-time check is run from a second connection with NOWAIT: it must
not find the project's row locked.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from django.db import connection, transaction

from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.actions.curation import get_record
from memory_admin.memory.actions.disputes import get_dispute
from memory_admin.memory.models import Dispute, MemoryRecord
from tests.support import at, deadline

pytestmark = pytest.mark.postgres_only(reason="row locks and FOR KEY SHARE NOWAIT are PostgreSQL's")


def row_lockable_elsewhere(table: str, pk: int) -> str:
    """What a second connection gets when it takes a deferred foreign-key check's lock on row `pk` of `table`
    without waiting: "free", or the error it raised."""
    found: dict[str, str] = {}

    def check() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR KEY SHARE NOWAIT", [pk])
                found["result"] = "free" if cursor.fetchone() == (1,) else "no row"
        except Exception as exc:  # the lock not available: what the assertion reports
            found["result"] = type(exc).__name__
        finally:
            connection.close()

    thread = threading.Thread(target=contextvars.copy_context().run, args=(check,))
    thread.start()
    thread.join(timeout=30)
    return found.get("result", "no answer within 30 s")


def project_row_lockable_elsewhere(project_id: int) -> str:
    """The project's row (the deferred foreign-key check of a record, a dispute or an action)."""
    return row_lockable_elsewhere("memory_project", project_id)


def locked_while(lock: Callable[[], Any], project_id: int) -> str:
    with transaction.atomic():
        lock()
        return project_row_lockable_elsewhere(project_id)


@pytest.mark.django_db(transaction=True)
def test_locking_a_dispute_a_record_or_an_action_leaves_the_project_row_free(agent, other_agent, owner) -> None:
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r1", at(10, 20), ref="chat:1")).record
    assert_fact(other_agent, deadline("2026-10-31T17:00+09:00", "r1", at(10, 20), ref="chat:2"))
    dispute = Dispute.objects.get(subject_id=first.subject_id)
    other = assert_fact(agent, replace(deadline("2026-11-02T17:00+09:00", "r1", at(10, 20)), subject_id="other")).record
    plan = lineage.schedule_action(
        agent,
        project_id="project-a",
        kind="send_reminder",
        payload={"to": "team"},
        due_at=at(10, 29, 9),
        bases=[BaseRef(other.memory_id, 1)],
    )
    project_id = MemoryRecord.objects.get(pk=other.pk).project_id
    assert project_row_lockable_elsewhere(project_id) == "free"  # the check itself works

    assert locked_while(lambda: get_dispute(owner, dispute.public_id, for_update=True), project_id) == "free"
    assert locked_while(lambda: get_record(owner, other.memory_id, for_update=True), project_id) == "free"
    assert locked_while(lambda: lineage.get_action(agent, plan.public_id, for_update=True), project_id) == "free"


def record_row_lockable_elsewhere(record_pk: int) -> str:
    """A record's row (a cache manifest's or a receipt's foreign key)."""
    return row_lockable_elsewhere("memory_memoryrecord", record_pk)


@pytest.mark.django_db(transaction=True)
def test_a_write_in_progress_does_not_block_foreign_key_checks_on_the_facts_records(agent) -> None:
    """A write holds its fact's records until it commits (FOR NO KEY UPDATE): other writers of the fact wait, but a
    read filling the cache, whose manifest names the current record, checks that foreign key at its COMMIT without
    waiting. With FOR UPDATE it waited, while the write waited to evict that manifest's row: a deadlock, found by
    `make soak` (a 503 on GET /facts/current/)."""
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    with transaction.atomic():
        assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))
        assert record_row_lockable_elsewhere(first.pk) == "free"
    assert MemoryRecord.objects.get(pk=first.pk).status == "superseded"
