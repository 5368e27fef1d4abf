"""The audit trail: one immutable event per domain change, in the change's own transaction."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, cast

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.lib import rows, sealing
from memory_admin.memory import audit_chain
from memory_admin.memory.models import AuditEvent, MemoryRecord


class Action(models.TextChoices):
    """The audit log's vocabulary: every action any layer writes, in one list.

    Every writer passes a member (never a string literal), including writers above this layer (deletion);
    the audit page's action filter is built from this list, and tests/dashboard/test_tiles_audit_and_details.py checks
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
    # A resolution undone within its window (memory.actions.disputes.reopen_dispute): the record as it was before.
    RECORD_DISPUTE_REOPENED = "record.dispute_reopened"
    # An agent asked for a record to be expired (memory.expiry); an owner approved (then RECORD_EXPIRED follows) or
    # declined. Written about the record (object_id = its memory_id), so a deletion of it redacts them too.
    RECORD_EXPIRY_REQUESTED = "record.expiry_requested"
    RECORD_EXPIRY_APPROVED = "record.expiry_approved"
    RECORD_EXPIRY_DECLINED = "record.expiry_declined"
    # One per recheck result (RecheckAttempt.Result): "record.rechecked.<outcome>".
    RECORD_RECHECKED_VERIFIED_UNCHANGED = "record.rechecked.verified_unchanged"
    RECORD_RECHECKED_VERIFIED_CHANGED = "record.rechecked.verified_changed"
    RECORD_RECHECKED_SOURCE_UNAVAILABLE = "record.rechecked.source_unavailable"
    RECORD_RECHECKED_SOURCE_AMBIGUOUS = "record.rechecked.source_ambiguous"
    RECORD_RECHECKED_NOT_CHECKED = "record.rechecked.not_checked"
    DISPUTE_OPENED = "dispute.opened"
    DISPUTE_RESOLVED = "dispute.resolved"
    DISPUTE_REOPENED = "dispute.reopened"
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


_SNAPSHOT_VALUES = attrgetter(*_SNAPSHOT_FIELDS)


def snapshot(record: MemoryRecord) -> dict[str, Any]:
    """The record as the audit log keeps it: its fields as JSON gives them back (`DjangoJSONEncoder`: datetimes
    as ISO text)."""
    data = {name: _as_json(value) for name, value in zip(_SNAPSHOT_FIELDS, _SNAPSHOT_VALUES(record), strict=True)}
    # A successor may be assigned before it is saved (memory.batch inserts in bulk): its cached object names it.
    successor = (
        record.superseded_by if record.superseded_by_id or MemoryRecord.superseded_by.is_cached(record) else None
    )
    data["superseded_by"] = successor.memory_id if successor is not None else None
    return data


_ENCODER = DjangoJSONEncoder()
# The text of UTC datetimes already converted: a batch's snapshots repeat a few (its `now`, the facts' valid_from,
# the heads' recorded_from) thousands of times. Only UTC ones (the database's and timezone.now()'s zone), so that
# equal keys are equal wall times of one zone, hence one text; emptied when full.
_UTC_TEXT: dict[datetime, str] = {}
_UTC_TEXT_SIZE = 4096


def _datetime_text(value: datetime) -> str:
    """`DjangoJSONEncoder().default(value)`, remembered for a UTC datetime."""
    if value.tzinfo is not UTC:
        return cast(str, _ENCODER.default(value))
    text = _UTC_TEXT.get(value)
    if text is None:
        if len(_UTC_TEXT) >= _UTC_TEXT_SIZE:
            _UTC_TEXT.clear()
        text = _UTC_TEXT[value] = cast(str, _ENCODER.default(value))
    return text


def _as_json(value: Any) -> Any:
    """`json.loads(json.dumps(value, cls=DjangoJSONEncoder))`, without the round trip for the values a record's
    fields hold most (a snapshot is made two or three times per assertion): text (a TextChoices member becomes
    its plain str), integers, booleans, None, datetimes (the encoder's own text) and a value made of JSON's own
    types (`_plain_copy`)."""
    kind = type(value)
    if kind is str or value is None or kind is int or kind is bool:
        return value
    if kind is datetime:
        return _datetime_text(value)
    if isinstance(value, str):
        return str.__str__(value)
    if kind is dict or kind is list:
        copied = _plain_copy(value, _PLAIN_DEPTH)
        if copied is not _NOT_PLAIN:
            return copied
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


# Returned by _plain_copy for a value it leaves to the JSON round trip.
_NOT_PLAIN: Any = object()
# How deep _plain_copy follows nested containers before it leaves the value to the round trip (which also
# refuses a container that holds itself, as before).
_PLAIN_DEPTH = 32
# The scalars json.loads(json.dumps(x)) gives back equal and of the same type (exact types: a subclass of str or
# int is written as its base type). A float keeps its value: its JSON text is its repr (NaN and infinities too).
_PLAIN_SCALARS = frozenset({str, int, bool, float, type(None)})
# Integers at least this large are left to the round trip: past Python's limit of digits (sys.set_int_max_str_digits)
# json.dumps refuses them, and the copy must refuse what the round trip refuses.
_PLAIN_INT = 10**18


def _plain_copy(value: Any, depth: int) -> Any:
    """A new copy of `value` if it is made only of dicts with text keys, lists and _PLAIN_SCALARS, nested at most
    `depth` deep: what the JSON round trip would give back, built without writing and parsing the text (a record's
    `value`, made two or three times per assertion). Anything else (a tuple, a non-text key, a datetime inside, a
    subclass, a very large integer): `_NOT_PLAIN`."""
    if depth == 0:
        return _NOT_PLAIN
    if type(value) is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            copied = _plain_item(item, depth) if type(key) is str else _NOT_PLAIN
            if copied is _NOT_PLAIN:
                return _NOT_PLAIN
            out[key] = copied
        return out
    items: list[Any] = []
    for item in value:
        copied = _plain_item(item, depth)
        if copied is _NOT_PLAIN:
            return _NOT_PLAIN
        items.append(copied)
    return items


def _plain_item(item: Any, depth: int) -> Any:
    """An element of a container `_plain_copy` copies at `depth`: copied, itself, or `_NOT_PLAIN`."""
    kind = type(item)
    if kind is dict or kind is list:
        return _plain_copy(item, depth - 1)
    if kind not in _PLAIN_SCALARS or (kind is int and not -_PLAIN_INT < item < _PLAIN_INT):
        return _NOT_PLAIN
    return item


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
    # The fact the event is about (a record's, a dispute's): its snapshots' values and its reason are stored sealed
    # under the fact's data key (`stored`), so a deletion that destroys the key leaves no readable copy.
    fact: sealing.Fact | None = None

    def stored(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
        """before, after and reason as the row keeps them: sealed under the fact's key when there is one."""
        return stored_form(self.before, self.after, self.reason, self.fact)


def stored_form(
    before: dict[str, Any] | None, after: dict[str, Any] | None, reason: str, fact: sealing.Fact | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    """An audit event's snapshots and reason as stored: about a fact, and with sealing on, the snapshots' values
    (`sealing.SNAPSHOT_KEYS`) and the reason sealed under the fact's data key; otherwise as they are."""
    if fact is None or not sealing.enabled():
        return before, after, reason
    sealed_reason = sealing.seal_text(reason, fact, "audit.reason") if reason else reason
    return sealing.seal_snapshot(before, fact), sealing.seal_snapshot(after, fact), sealed_reason


def record_events(events: list[Event], *, tenant: Tenant | int, at: datetime) -> None:
    """Write several events of one change, chained in order (memory.audit_chain), in a single INSERT that also
    moves the tenant's chain head (lib.rows.insert_many_then: one round trip on PostgreSQL)."""
    if not events:
        return
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with audit_chain.appending():
        head = audit_chain.lock_head(tenant_id)
        objs = [rows.build(AuditEvent, _sealed(head, tenant_id, at, e)) for e in events]
        last_id = rows.insert_many_then(objs, *audit_chain.head_update(head))
        audit_chain.after_append(head, last_id)


def _sealed(head: audit_chain.Head, tenant_id: int, at: datetime, e: Event) -> dict[str, Any]:
    """An event's row, chained: its commitments cover the snapshots and reason as stored (sealed under the fact's
    data key when there is one), so the chain still verifies once a deletion destroyed that key."""
    before, after, reason = e.stored()
    values = {
        "tenant_id": tenant_id,
        "at": at,
        "actor_id": e.actor.pk if e.actor else None,
        "actor_name": (e.actor.name or e.actor.username) if e.actor else "system",
        "action": e.action,
        "object_type": e.object_type,
        "object_id": e.object_id,
        "before": before,
        "after": after,
        "reason": reason,
    }
    audit_chain.seal(head, values)
    if e.actor is not None:
        del values["actor_id"]
        values["actor"] = e.actor  # cached on the instance, as before
    return values


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
    fact: sealing.Fact | None = None,
) -> AuditEvent:
    """Write one event, chained after the tenant's last (memory.audit_chain); the saved event. With `fact`, its
    snapshots' values and reason are stored sealed (`stored_form`)."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    event = Event(actor, action, object_type, object_id, before, after, reason, fact)
    with audit_chain.appending():
        head = audit_chain.lock_head(tenant_id)
        obj = rows.build(AuditEvent, _sealed(head, tenant_id, timezone.now() if at is None else at, event))
        obj.pk = rows.insert_many_then([obj], *audit_chain.head_update(head))
        if not isinstance(tenant, int):
            AuditEvent.tenant.field.set_cached_value(obj, tenant)
        audit_chain.after_append(head, obj.pk)
    return obj


@contextmanager
def changing[T](
    obj: T,
    *,
    actor: Principal | None,
    action: Action,
    reason: str = "",
    at: datetime | None = None,
    tenant: Tenant | int | None = None,
    object_type: str = "",
    object_id: str = "",
    snapshot_of: Callable[[T], dict[str, Any]] | None = None,
    into: list[Event] | None = None,
    fact: sealing.Fact | None = None,
) -> Iterator[Event]:
    """Audit the change the block makes to `obj`, in the change's transaction:

    1. take `obj`'s before-snapshot;
    2. the block changes `obj` (and saves it);
    3. take the after-snapshot and write the event (`record_event`), or, with `into`, append it there for the
       caller to write with others (`record_events`).

    A record (MemoryRecord) needs nothing more: its tenant, "record", its memory_id and `snapshot` are the
    defaults. Anything else names its tenant, object_type and object_id, and a `snapshot_of` function if the
    event keeps snapshots (else before and after stay None). The block may adjust the yielded event: an `after`
    or a reason known only once the change is made, an action that depends on what the change concluded.

    If the block raises, no event is written and the change goes with the transaction: the block runs in the
    caller's transaction (no savepoint, no extra statement), which an exception marks for rollback, or in one of
    its own when the caller has none.
    With `into`, the caller writes the events, so they and the change share the caller's transaction.

    An object about a fact (one with `sealing_fact()`: a record, a dispute, an expiry request), or a `fact` given,
    has the event's snapshots' values and reason stored sealed under the fact's data key (`Event.stored`).
    """
    if fact is None:
        fact = sealing.fact_of(obj)
    if isinstance(obj, MemoryRecord):
        tenant = obj.tenant_id if tenant is None else tenant
        object_type = object_type or "record"
        object_id = object_id or obj.memory_id
        snapshot_of = snapshot_of or cast(Callable[[T], dict[str, Any]], snapshot)
    if tenant is None or not object_type or not object_id:
        raise TypeError("audit.changing needs the tenant, object_type and object_id of what is not a record.")
    event = Event(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=object_id,
        before=snapshot_of(obj) if snapshot_of else None,
        reason=reason,
        fact=fact,
    )
    if into is not None:
        # The caller writes the events it collects, in its own transaction (memory.batch: many in one INSERT).
        yield event
        if snapshot_of is not None:
            event.after = snapshot_of(obj)
        into.append(event)
        return
    # Inside the caller's transaction, a failure marks it for rollback (no savepoint, no statement); without one,
    # the change and its event get a transaction of their own.
    in_transaction = transaction.get_connection().in_atomic_block
    with transaction.mark_for_rollback_on_error() if in_transaction else transaction.atomic():
        yield event
        if snapshot_of is not None:
            event.after = snapshot_of(obj)
        record_event(
            tenant=tenant,
            actor=event.actor,
            action=event.action,
            object_type=event.object_type,
            object_id=event.object_id,
            before=event.before,
            after=event.after,
            reason=event.reason,
            at=at,
            fact=event.fact,
        )
