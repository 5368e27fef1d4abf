"""The audit trail: one immutable event per domain change, in the change's own transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.memory import rows
from memory_admin.memory.models import AuditEvent, MemoryRecord


class Action(models.TextChoices):
    """The audit log's vocabulary: every action any layer writes, in one list.

    Every writer passes a member (never a string literal), including writers above this layer (deletion);
    the audit page's action filter is built from this list, and tests/test_dashboard_small_fixes.py checks
    that no action is written as a literal. Values are plain strings: an event stored as "record.excluded"
    equals Action.RECORD_EXCLUDED.
    """

    RECORD_ASSERTED_CREATED = "record.asserted.created"
    RECORD_ASSERTED_HISTORY = "record.asserted.history"
    RECORD_ASSERTED_DISPUTED = "record.asserted.disputed"
    RECORD_SUPERSEDED = "record.superseded"
    RECORD_DISPUTED = "record.disputed"
    RECORD_EXCLUDED = "record.excluded"
    RECORD_EXPIRED = "record.expired"
    RECORD_DISPUTE_RESOLVED = "record.dispute_resolved"
    # One per recheck result (RecheckAttempt.Result): "record.rechecked.<outcome>".
    RECORD_RECHECKED_VERIFIED_UNCHANGED = "record.rechecked.verified_unchanged"
    RECORD_RECHECKED_VERIFIED_CHANGED = "record.rechecked.verified_changed"
    RECORD_RECHECKED_SOURCE_UNAVAILABLE = "record.rechecked.source_unavailable"
    RECORD_RECHECKED_SOURCE_AMBIGUOUS = "record.rechecked.source_ambiguous"
    RECORD_RECHECKED_NOT_CHECKED = "record.rechecked.not_checked"
    DISPUTE_OPENED = "dispute.opened"
    DISPUTE_RESOLVED = "dispute.resolved"
    POLICY_CREATED = "policy.created"
    POLICY_UPDATED = "policy.updated"
    POLICY_DELETED = "policy.deleted"
    DELETION_REQUESTED = "deletion.requested"
    DELETION_APPROVED = "deletion.approved"
    DELETION_CANCELLED = "deletion.cancelled"
    DELETION_REOPENED = "deletion.reopened"
    DELETION_PURGE_CONFIRMED = "deletion.purge_confirmed"
    TOMBSTONE_LIFTED = "tombstone.lifted"
    # API tokens (memory.tokens): issued by an admin or a command, revoked by an admin or a command.
    TOKEN_ISSUED = "token.issued"
    TOKEN_REVOKED = "token.revoked"
    # A tenant admin unlocked a person's sign-in after a lockout (memory.lockouts).
    LOGIN_UNLOCKED = "login.unlocked"
    # A background task skipped one row (memory.task_failures).
    TASK_FAILED = "task.failed"
    # An agent called a tool of the MCP server (memory_admin/mcp): the tool and how it ended, never arguments.
    MCP_TOOL_CALLED = "mcp.tool_called"


def asserted(outcome: str) -> Action:
    """The action of an assertion's outcome (memory.actions.Outcome); ValueError if it is not audited."""
    return Action(f"record.asserted.{outcome}")


def rechecked(result: str) -> Action:
    """The action of a recheck attempt's result (RecheckAttempt.Result)."""
    return Action(f"record.rechecked.{result}")


_SNAPSHOT_FIELDS = (
    "status",
    "value",
    "revision",
    "valid_from",
    "valid_to",
    "recorded_from",
    "recorded_to",
    "last_verified_at",
    "recheck_after",
    "source_canonical_ref",
    "source_revision",
    "status_reason",
)


def snapshot(record: MemoryRecord) -> dict[str, Any]:
    """The record as the audit log keeps it: its fields as JSON gives them back (`DjangoJSONEncoder`: datetimes
    as ISO text)."""
    data = {name: _as_json(getattr(record, name)) for name in _SNAPSHOT_FIELDS}
    # A successor may be assigned before it is saved (memory.batch inserts in bulk): its cached object names it.
    successor = (
        record.superseded_by if record.superseded_by_id or MemoryRecord.superseded_by.is_cached(record) else None
    )
    data["superseded_by"] = successor.memory_id if successor is not None else None
    return data


_ENCODER = DjangoJSONEncoder()


def _as_json(value: Any) -> Any:
    """`json.loads(json.dumps(value, cls=DjangoJSONEncoder))`, without the round trip for the values a record's
    fields hold most (a snapshot is made two or three times per assertion): text (a TextChoices member becomes
    its plain str), integers, booleans, None and datetimes (the encoder's own text)."""
    kind = type(value)
    if value is None or kind is int or kind is bool:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if kind is datetime:
        return _ENCODER.default(value)
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


@dataclass
class Event:
    """An audit event to write; see record_events."""

    actor: Principal | None
    action: Action
    object_type: str
    object_id: str
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    reason: str = ""


def record_events(events: list[Event], *, tenant: Tenant | int, at: datetime) -> None:
    """Write several events of one change in a single INSERT (rows.insert_many: bulk_create's statement, its SQL
    not compiled anew on every write)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    rows.insert_many(
        [
            rows.build(
                AuditEvent,
                {
                    "tenant_id": tenant_id,
                    "at": at,
                    "actor": e.actor,
                    "actor_name": (e.actor.name or e.actor.username) if e.actor else "system",
                    "action": e.action,
                    "object_type": e.object_type,
                    "object_id": e.object_id,
                    "before": e.before,
                    "after": e.after,
                    "reason": e.reason,
                },
            )
            for e in events
        ]
    )


def record_event(
    *,
    tenant: Tenant | int,
    actor: Principal | None,
    action: Action,
    object_type: str,
    object_id: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    reason: str = "",
    at: datetime | None = None,
) -> AuditEvent:
    kwargs: dict[str, Any] = {}
    if at is not None:
        kwargs["at"] = at
    tenant_kw = {"tenant_id": tenant} if isinstance(tenant, int) else {"tenant": tenant}
    return AuditEvent.objects.create(
        **tenant_kw,
        actor=actor,
        actor_name=actor.name or actor.username if actor else "system",
        action=action,
        object_type=object_type,
        object_id=object_id,
        before=before,
        after=after,
        reason=reason,
        **kwargs,
    )
