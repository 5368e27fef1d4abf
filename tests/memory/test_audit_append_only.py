"""The audit log is append-only: no door of the app, nor SQL on PostgreSQL, can rewrite it."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from memory_admin.memory.models import AuditEvent


def test_every_domain_change_writes_an_audit_event_with_actor_and_before_after(moved_deadline):
    superseded = AuditEvent.objects.get(action="record.superseded")
    assert superseded.before is not None and superseded.after is not None
    assert superseded.actor_name == "agent-7"
    assert superseded.before["status"] == "accepted"
    assert superseded.after["status"] == "superseded"
    assert superseded.after["superseded_by"] == moved_deadline[1].record.memory_id


def test_the_model_refuses_to_update_or_delete_audit_events(moved_deadline):
    event = AuditEvent.objects.first()
    assert event is not None
    event.reason = "rewritten"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()


@pytest.mark.postgres_only(reason="the trigger that refuses SQL updates and deletes of audit events (migration 0002)")
def test_postgres_refuses_sql_updates_and_deletes_of_audit_events(moved_deadline):
    event = AuditEvent.objects.first()
    assert event is not None
    for sql in (
        "UPDATE memory_auditevent SET reason = 'x' WHERE id = %s",
        "DELETE FROM memory_auditevent WHERE id = %s",
    ):
        with pytest.raises(DatabaseError, match="immutable"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [event.pk])
    assert AuditEvent.objects.get(pk=event.pk).reason == event.reason


@pytest.mark.postgres_only(reason="the trigger's redaction rule (migration 0017): only PostgreSQL has the trigger")
def test_a_redaction_in_sql_must_keep_the_chain_columns(moved_deadline):
    """A deletion's redaction may blank the values and clear the nonce; it may not touch the chain's columns, so the
    app cannot pass a rewrite off as a redaction."""
    event = AuditEvent.objects.first()
    assert event is not None
    for change in ("hash = 'f'", "prev_hash = ''", "before_commitment = ''", "nonce = 'abcd'"):
        with pytest.raises(DatabaseError, match="immutable"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE memory_auditevent SET reason = 'x', redacted_at = now(), {change} WHERE id = %s", [event.pk]
            )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_auditevent SET reason = 'x', before = NULL, nonce = '', redacted_at = now() WHERE id = %s",
            [event.pk],
        )
    kept = AuditEvent.objects.get(pk=event.pk)
    assert kept.reason == "x" and kept.nonce == "" and kept.hash == event.hash
