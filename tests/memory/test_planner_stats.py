"""The planner's statistics refreshed after a large import (issue 36, item 4; memory/planner_stats.py).

A batch of STATS_REFRESH_BATCH_MIN assertions or more queues the refresh after commit (PostgreSQL); the refresh
analyzes the records table once enough rows changed, through the owner's SECURITY DEFINER function, so the app
role the tests connect as (which owns no table) may run it. The before/after figure is `make bench-stale-stats`."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory import batch, planner_stats
from memory_admin.memory.actions import Assertion
from memory_admin.memory.batch import assert_facts
from tests.support import at, on_postgres
from tests.support.celery_worker import wait_until
from tests.support.queueing import RecordingTask


def facts(run: str, n: int) -> list[Assertion | Any]:
    return [
        Assertion(
            project_id="project-b",
            subject_id=f"{run}-{i:05d}",
            predicate="owner",
            value=i,
            valid_from=at(10, 20),
            source_canonical_ref=f"crm:{run}:{i}",
            source_revision="r1",
        )
        for i in range(n)
    ]


@pytest.mark.django_db
def test_a_large_batch_queues_the_refresh_after_commit_and_a_small_one_does_not(
    settings, agent, monkeypatch, django_capture_on_commit_callbacks
):
    settings.STATS_REFRESH_BATCH_MIN = 5
    queued = RecordingTask()
    names: list[str] = []

    def signature(name: str) -> RecordingTask:
        names.append(name)
        return queued

    monkeypatch.setattr(batch, "signature", signature)
    with tenant_context(agent.tenant_id), django_capture_on_commit_callbacks(execute=True):
        assert_facts(agent, facts("small", 4))
    assert queued.calls == []
    with tenant_context(agent.tenant_id), django_capture_on_commit_callbacks(execute=True):
        assert_facts(agent, facts("large", 5))
    if on_postgres():
        assert names == [batch.REFRESH_PLANNER_STATISTICS] and queued.calls == [()]
    else:  # SQLite keeps no statistics that go stale: nothing to queue
        assert queued.calls == []


@pytest.mark.django_db(transaction=True)
def test_the_refresh_analyzes_the_records_once_enough_rows_changed_as_the_app_role(settings, agent):
    if not on_postgres():
        assert planner_stats.refresh(min_changed=1000) == []  # nothing to do on SQLite, said by the empty answer
        return
    with tenant_context(agent.tenant_id):
        assert_facts(agent, facts("import", 1000))  # committed: 1,000 new records (and their audit events)
    # The server counts changed rows a moment after the commit (its statistics are flushed about once a second).
    analyzed: list[str] = []

    def refreshed() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
        analyzed.extend(planner_stats.refresh(min_changed=1000))
        return "memory_memoryrecord" in analyzed

    assert wait_until(refreshed, timeout=30)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user, pg_stat_clear_snapshot()")
        if settings.DATABASE_APP_ROLE:  # `make test`: the refresh ran as the app role, which owns no table
            assert cursor.fetchone()[0] == settings.DATABASE_APP_ROLE
        cursor.execute(
            "SELECT n_mod_since_analyze, last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = %s",
            ["memory_memoryrecord"],
        )
        changed, analyzed_once = cursor.fetchone()
    assert analyzed_once and changed < 1000
    assert "memory_memoryrecord" not in planner_stats.refresh(min_changed=1000)  # nothing changed since
