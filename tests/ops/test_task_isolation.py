"""A background task never stops for every tenant because of one row: the bad row is logged, skipped and
shown to its tenant's owners on the overview page; every other row (and tenant) is processed."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test import Client
from django.utils import timezone

from memory_admin.accounts.tenancy import for_each_tenant, tenant_context
from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import ScheduledAction
from memory_admin.memory import tasks
from memory_admin.memory.actions import Assertion, assert_fact, settle_valid_time_transitions
from memory_admin.memory.models import AuditEvent, MemoryRecord
from tests.support import deadline

Status = MemoryRecord.Status


def _corrupt(record: MemoryRecord) -> None:
    """Simulate a row stored before datetimes were range-checked: validity in year 1 BC in UTC, which
    PostgreSQL holds but Python cannot load. (The API refuses such input now, so it is written in SQL.)"""
    # SQLite keeps datetimes as the UTC text Django wrote: the same instants, in year 0, fail to load alike.
    bad = ("0001-01-01 00:00:00+05:00", "0001-01-01 01:00:00+05:00")
    if connection.vendor == "sqlite":
        bad = ("0000-12-31 19:00:00", "0000-12-31 20:00:00")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE memory_memoryrecord SET valid_from = %s, valid_to = %s WHERE id = %s", [*bad, record.pk])


def _ending_fact(principal, subject: str, now):
    """An accepted fact valid until an hour from now, with an action planned from it."""
    assertion = Assertion(
        project_id="project-a",
        subject_id=subject,
        predicate="submission_deadline",
        value="v",
        valid_from=now - timedelta(days=1),
        valid_to=now + timedelta(hours=1),
        source_canonical_ref=f"task-system:project-a/{subject}",
        source_revision="r1",
    )
    record = assert_fact(principal, assertion).record
    action = lineage.schedule_action(
        principal,
        project_id="project-a",
        kind="send_reminder",
        payload={},
        due_at=now + timedelta(days=2),
        bases=[BaseRef(record.memory_id, record.revision)],
    )
    return record, action


def test_a_bad_row_in_one_tenant_does_not_stop_another_tenants_transitions(agent, outsider, owner):
    now = timezone.now()
    bad = assert_fact(agent, deadline("x", "r1", now - timedelta(days=3))).record
    _corrupt(bad)
    mine, my_action = _ending_fact(agent, "task-mine", now)
    with tenant_context(outsider.tenant_id):  # on PostgreSQL, row-level security admits its own tenant only
        theirs, their_action = _ending_fact(outsider, "task-theirs", now)

    # The beat task's path: tenant by tenant, each under its own row-level security scope.
    settled = sum(
        settle_valid_time_transitions(now=now + timedelta(hours=2)) for _ in for_each_tenant("test transitions")
    )

    assert settled == 2
    for principal, record, action in ((outsider, theirs, their_action), (agent, mine, my_action)):
        with tenant_context(principal.tenant_id):
            record.refresh_from_db()
            action.refresh_from_db()
        assert record.status == Status.EXPIRED
        assert action.status == ScheduledAction.Status.SUSPENDED
    # The bad row is skipped, left as it was, and recorded in its own tenant only.
    assert MemoryRecord.objects.filter(pk=bad.pk, status=Status.ACCEPTED).exists()
    failures = AuditEvent.objects.filter(action="task.failed")
    assert [(f.tenant_id, f.object_id) for f in failures] == [(agent.tenant_id, bad.memory_id)]
    assert failures[0].reason.startswith("settle_valid_time_transitions:")


def test_a_failure_that_repeats_every_minute_is_recorded_once_a_day(agent):
    now = timezone.now()
    bad = assert_fact(agent, deadline("x", "r1", now - timedelta(days=3))).record
    _corrupt(bad)
    for minute in range(3):
        assert settle_valid_time_transitions(now=now + timedelta(minutes=minute)) == 0
    assert AuditEvent.objects.filter(action="task.failed").count() == 1
    settle_valid_time_transitions(now=now + timedelta(days=1, minutes=1))
    assert AuditEvent.objects.filter(action="task.failed").count() == 2


def test_the_beat_task_runs_through_a_bad_row(agent, outsider):
    bad = assert_fact(agent, deadline("x", "r1", timezone.now() - timedelta(days=3))).record
    _corrupt(bad)
    past = timezone.now() - timedelta(days=2)
    with tenant_context(outsider.tenant_id):
        theirs = assert_fact(outsider, deadline("v", "r1", past, valid_to=past + timedelta(days=1))).record
    assert tasks.settle_valid_time_transitions() == 1
    with tenant_context(outsider.tenant_id):
        theirs.refresh_from_db()
    assert theirs.status == Status.EXPIRED


def test_the_overview_shows_task_failures_to_owners_of_that_tenant_only(agent, owner, outsider):
    bad = assert_fact(agent, deadline("x", "r1", timezone.now() - timedelta(days=3))).record
    _corrupt(bad)
    settle_valid_time_transitions()
    client = Client()
    client.force_login(owner)
    page = client.get("/")
    assert page.status_code == 200
    assert "Background task failures" in page.content.decode()
    assert bad.memory_id in page.content.decode()
    other = Client()
    other.force_login(outsider)
    assert "Background task failures" not in other.get("/").content.decode()


def test_a_recheck_of_a_row_that_cannot_be_loaded_is_recorded_not_raised(agent):
    bad = assert_fact(agent, deadline("x", "r1", timezone.now() - timedelta(days=3))).record
    _corrupt(bad)
    assert tasks.recheck_record(bad.pk) == "failed"
    failure = AuditEvent.objects.get(action="task.failed")
    assert (failure.tenant_id, failure.object_id) == (agent.tenant_id, bad.memory_id)
    assert failure.reason.startswith("recheck_record:")
