"""`audit.changing`, the one way a change and its audit event are written together: the event carries the
object's snapshot before and after the change, and a change that fails writes no event and leaves nothing
changed, inside the caller's transaction or, without one, in its own."""

from __future__ import annotations

import pytest
from django.db import transaction

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditEvent, MemoryRecord
from tests.support import at, deadline

Status = MemoryRecord.Status


class StoreDown(Exception):
    pass


def a_record(agent: Principal) -> MemoryRecord:
    result = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1))
    return MemoryRecord.objects.get(pk=result.record.pk)


def exclude(record: MemoryRecord, reason: str) -> None:
    record.status = Status.EXCLUDED
    record.status_reason = reason
    record.save(update_fields=["status", "status_reason"])


def test_a_record_s_event_carries_its_snapshot_before_and_after_the_change(agent, owner):
    record = a_record(agent)
    expected_before = audit.snapshot(record)
    with (
        transaction.atomic(),
        audit.changing(record, actor=owner, action=audit.Action.RECORD_EXCLUDED, reason="Wrong", at=at(10, 21)),
    ):
        exclude(record, "Wrong")
    event = AuditEvent.objects.get(action=audit.Action.RECORD_EXCLUDED)
    assert event.before == expected_before and event.before["status"] == "accepted"
    assert event.after == {**expected_before, "status": "excluded", "status_reason": "Wrong"}
    assert (event.tenant_id, event.object_type, event.object_id) == (record.tenant_id, "record", record.memory_id)
    assert (event.actor_id, event.actor_name, event.reason, event.at) == (owner.pk, "olivia", "Wrong", at(10, 21))


def test_a_failing_change_writes_no_event_and_changes_nothing_in_the_caller_s_transaction(agent, owner):
    record = a_record(agent)
    events = AuditEvent.objects.count()
    with pytest.raises(StoreDown), transaction.atomic():
        with audit.changing(record, actor=owner, action=audit.Action.RECORD_EXCLUDED, reason="Wrong"):
            exclude(record, "Wrong")
            raise StoreDown
    assert AuditEvent.objects.count() == events
    assert MemoryRecord.objects.filter(pk=record.pk, status=Status.ACCEPTED, status_reason="").exists()


@pytest.mark.django_db(transaction=True)
def test_a_failing_change_writes_no_event_and_changes_nothing_without_a_transaction_of_the_caller(agent, owner):
    record = a_record(agent)
    events = AuditEvent.objects.count()
    assert not transaction.get_connection().in_atomic_block
    with pytest.raises(StoreDown):
        with audit.changing(record, actor=owner, action=audit.Action.RECORD_EXCLUDED, reason="Wrong"):
            exclude(record, "Wrong")
            raise StoreDown
    assert AuditEvent.objects.count() == events
    assert MemoryRecord.objects.filter(pk=record.pk, status=Status.ACCEPTED, status_reason="").exists()
    # Without the failure the same change and its event are committed together.
    with audit.changing(record, actor=owner, action=audit.Action.RECORD_EXCLUDED, reason="Wrong"):
        exclude(record, "Wrong")
    assert MemoryRecord.objects.filter(pk=record.pk, status=Status.EXCLUDED).exists()
    assert AuditEvent.objects.filter(action=audit.Action.RECORD_EXCLUDED, object_id=record.memory_id).count() == 1


def test_another_object_is_named_by_its_caller_and_keeps_no_snapshot_unless_given(agent, owner):
    record = a_record(agent)
    with pytest.raises(TypeError):
        with audit.changing(owner, actor=owner, action=audit.Action.LOGIN_UNLOCKED):
            pass
    with (
        transaction.atomic(),
        audit.changing(
            owner,
            tenant=owner.tenant_pk,
            object_type="principal",
            object_id=str(owner.pk),
            actor=owner,
            action=audit.Action.LOGIN_UNLOCKED,
        ) as event,
    ):
        event.after = {"login": owner.username}
    with (
        transaction.atomic(),
        audit.changing(
            record,
            object_type="record",
            actor=owner,
            action=audit.Action.RECORD_EXPIRED,
            snapshot_of=lambda r: {"status": r.status},
        ),
    ):
        record.status = Status.EXPIRED
        record.save(update_fields=["status"])
    unlocked = AuditEvent.objects.get(action=audit.Action.LOGIN_UNLOCKED)
    assert (unlocked.object_type, unlocked.object_id, unlocked.before, unlocked.after) == (
        "principal",
        str(owner.pk),
        None,
        {"login": owner.username},
    )
    expired = AuditEvent.objects.get(action=audit.Action.RECORD_EXPIRED)
    assert (expired.before, expired.after) == ({"status": "accepted"}, {"status": "expired"})


def test_events_collected_into_a_list_are_left_for_the_caller_to_write(agent, owner):
    record = a_record(agent)
    events = AuditEvent.objects.count()
    collected: list[audit.Event] = []
    with transaction.atomic():
        with audit.changing(record, actor=owner, action=audit.Action.RECORD_EXCLUDED, into=collected):
            exclude(record, "Wrong")
        assert AuditEvent.objects.count() == events
        audit.record_events(collected, tenant=record.tenant_id, at=at(10, 21))
    (event,) = collected
    assert event.before is not None and event.after is not None
    assert (event.before["status"], event.after["status"]) == ("accepted", "excluded")
    assert AuditEvent.objects.filter(action=audit.Action.RECORD_EXCLUDED, object_id=record.memory_id).count() == 1
