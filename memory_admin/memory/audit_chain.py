"""The audit log's hash chain, per tenant, and its signed checkpoints (docs/security.md, "Audit chain").

Each event stores `prev_hash` (its tenant's previous event's `hash`, or GENESIS for the first) and
`hash = sha256(canonical_bytes(link))` where `link` holds the event's who/what/when (tenant, time, actor,
action, object), the three commitments, and `prev_hash`. A commitment is HMAC-SHA256, keyed by the event's random
`nonce`, over the canonical JSON of its `before`, `after` or `reason`: the hash covers the commitment, not the
value, so a deletion's redaction (AuditQuerySet.redact) removes the values and the nonce and leaves the chain
verifiable, while a changed value that is not redacted no longer matches its commitment.

Appends of one tenant are serialized by its AuditChainHead row (locked with SELECT ... FOR UPDATE on PostgreSQL;
SQLite's transactions here begin IMMEDIATE, so writers are serialized anyway), so the chain never forks and its
order is the events' id order. Every AUDIT_CHECKPOINT_EVERY events, or at the first append after
AUDIT_CHECKPOINT_MINUTES, the appender signs a checkpoint (lib.signing): an owner who rewrites rows and their hashes
consistently up to the end of the chain cannot re-sign the checkpoints that covered them.

`verify_tenant` walks a tenant's chain in id order and reports the first event whose link, commitment or checkpoint
does not hold.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone
from memory_governance.trust import SignatureInvalid, canonical_bytes, digest

from memory_admin.lib import sealing, signing
from memory_admin.memory.models import AuditChainHead, AuditCheckpoint, AuditEvent

GENESIS = "0" * 64
# The version of the link's layout, inside every hashed link (a later layout would be version 2).
LINK_VERSION = 1
CHECKPOINT_TYPE = "audit_checkpoint"

_HEAD_TABLE = AuditChainHead._meta.db_table


# --- Commitments and links ------------------------------------------------------------------------------


def _big_floats_as_int(value: Any) -> Any:
    """Floats of 1e16 and beyond (integers all) as ints: PostgreSQL's jsonb gives them back as integers, so the
    text committed to at write time is the text the value reads back as."""
    if isinstance(value, float) and abs(value) >= 1e16 and value == value and abs(value) != float("inf"):
        return int(value)
    if isinstance(value, dict):
        return {key: _big_floats_as_int(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_big_floats_as_int(item) for item in value]
    return value


def value_text(value: Any) -> str:
    """The canonical JSON text of a stored value (before, after, reason): sorted keys, compact, UTF-8; the same
    for the value written and the value the database gives back (jsonb reorders keys; datetimes are stored as
    their text)."""
    try:
        text = json.dumps(value, cls=DjangoJSONEncoder, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except TypeError:  # keys that are not text (json writes them as text): compare what the database keeps
        value = json.loads(json.dumps(value, cls=DjangoJSONEncoder))
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if "e+" in text:  # maybe a float written in exponent form: the form it reads back as
        value = _big_floats_as_int(json.loads(text))
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text


def commitment(nonce: str, value: Any) -> str:
    return hmac.new(bytes.fromhex(nonce), value_text(value).encode("utf-8"), hashlib.sha256).hexdigest()


def _time_text(at: datetime) -> str:
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def link_hash(
    *,
    tenant_id: int,
    at: datetime,
    actor_id: int | None,
    actor_name: str,
    action: str,
    object_type: str,
    object_id: str,
    before_commitment: str,
    after_commitment: str,
    reason_commitment: str,
    prev_hash: str,
) -> str:
    return digest(
        canonical_bytes(
            {
                "v": LINK_VERSION,
                "tenant": tenant_id,
                "at": _time_text(at),
                "actor": actor_id,
                "actor_name": actor_name,
                "action": str(action),
                "object_type": object_type,
                "object_id": object_id,
                "before": before_commitment,
                "after": after_commitment,
                "reason": reason_commitment,
                "prev": prev_hash,
            }
        )
    )


# --- Appending ------------------------------------------------------------------------------------------


@dataclass
class Head:
    """A tenant's chain head, locked for the append under way."""

    tenant_id: int
    last_hash: str
    events: int
    checkpointed_events: int
    checkpointed_at: datetime | None
    appended: int = 0


_SELECT_HEAD = f"SELECT last_hash, events, checkpointed_events, checkpointed_at FROM {_HEAD_TABLE} WHERE tenant_id = %s"


def lock_head(tenant_id: int) -> Head:
    """The tenant's head, locked until the transaction ends (created on the tenant's first event). The caller
    is in a transaction (`appending`)."""
    lock = " FOR UPDATE" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(_SELECT_HEAD + lock, [tenant_id])
        row = cursor.fetchone()
        if row is None:
            cursor.execute(
                f"INSERT INTO {_HEAD_TABLE} (tenant_id, last_hash, events, checkpointed_events) "
                "VALUES (%s, %s, 0, 0) ON CONFLICT (tenant_id) DO NOTHING",
                [tenant_id, GENESIS],
            )
            cursor.execute(_SELECT_HEAD + lock, [tenant_id])
            row = cursor.fetchone()
    last_hash, events, checkpointed_events, checkpointed_at = row
    if checkpointed_at is not None and not isinstance(checkpointed_at, datetime):  # SQLite without converters
        checkpointed_at = datetime.fromisoformat(str(checkpointed_at))
    if checkpointed_at is not None and checkpointed_at.tzinfo is None:
        checkpointed_at = checkpointed_at.replace(tzinfo=UTC)
    return Head(tenant_id, last_hash or GENESIS, int(events), int(checkpointed_events), checkpointed_at)


def seal(head: Head, values: dict[str, Any]) -> None:
    """Add the chain's columns to an event's `values` (AuditEvent attnames: tenant_id, at, actor_id, ...) and
    move the head past it."""
    nonce = secrets.token_hex(16)
    before_c = commitment(nonce, values["before"])
    after_c = commitment(nonce, values["after"])
    reason_c = commitment(nonce, values["reason"])
    prev = head.last_hash
    values["prev_hash"] = prev
    values["nonce"] = nonce
    values["before_commitment"] = before_c
    values["after_commitment"] = after_c
    values["reason_commitment"] = reason_c
    head.last_hash = values["hash"] = link_hash(
        tenant_id=head.tenant_id,
        at=values["at"],
        actor_id=values["actor_id"],
        actor_name=values["actor_name"],
        action=values["action"],
        object_type=values["object_type"],
        object_id=values["object_id"],
        before_commitment=before_c,
        after_commitment=after_c,
        reason_commitment=reason_c,
        prev_hash=prev,
    )
    head.events += 1
    head.appended += 1


def head_update(head: Head) -> tuple[str, list[Any]]:
    """The UPDATE that stores the moved head (sent with the events' INSERT: lib.rows.insert_many_then)."""
    return (
        f"UPDATE {_HEAD_TABLE} SET last_hash = %s, events = %s WHERE tenant_id = %s",
        [head.last_hash, head.events, head.tenant_id],
    )


def store_head(head: Head) -> None:
    sql, params = head_update(head)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def appending() -> Any:
    """The transaction an append runs in: the caller's (no savepoint, no statement), else one of its own."""
    if connection.in_atomic_block:
        return transaction.mark_for_rollback_on_error()
    return transaction.atomic()


def checkpoint_every() -> int:
    return int(getattr(settings, "AUDIT_CHECKPOINT_EVERY", 1000))


def checkpoint_minutes() -> int:
    return int(getattr(settings, "AUDIT_CHECKPOINT_MINUTES", 60))


def checkpoint_due(head: Head, now: datetime) -> bool:
    """Every AUDIT_CHECKPOINT_EVERY events, and at the first append AUDIT_CHECKPOINT_MINUTES after the last
    checkpoint (or the tenant's first append)."""
    pending = head.events - head.checkpointed_events
    if pending <= 0:
        return False
    last = head.checkpointed_at
    return pending >= checkpoint_every() or last is None or now - last >= timedelta(minutes=checkpoint_minutes())


def after_append(head: Head, last_event_id: int) -> None:
    """Sign a checkpoint when one is due (the head is still locked)."""
    now = timezone.now()
    if checkpoint_due(head, now):
        write_checkpoint(head, last_event_id, now)


def checkpoint_document(*, tenant_id: int, event_id: int, event_hash: str, events: int, at: datetime) -> dict[str, Any]:
    """The signed form of a checkpoint (lib.signing adds algorithm, key_id and signature)."""
    return {
        "type": CHECKPOINT_TYPE,
        "tenant": tenant_id,
        "event_id": event_id,
        "event_hash": event_hash,
        "events": events,
        "at": _time_text(at),
    }


def write_checkpoint(head: Head, last_event_id: int, now: datetime) -> AuditCheckpoint:
    signed = signing.sign_document(
        checkpoint_document(
            tenant_id=head.tenant_id, event_id=last_event_id, event_hash=head.last_hash, events=head.events, at=now
        )
    )
    point = AuditCheckpoint.objects.create(
        tenant_id=head.tenant_id,
        event_id=last_event_id,
        event_hash=head.last_hash,
        events=head.events,
        at=now,
        algorithm=signed["algorithm"],
        key_id=signed["key_id"],
        signature=signed["signature"],
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_HEAD_TABLE} SET checkpointed_events = %s, checkpointed_at = %s WHERE tenant_id = %s",
            [head.events, connection.ops.adapt_datetimefield_value(now), head.tenant_id],
        )
    head.checkpointed_events, head.checkpointed_at = head.events, now
    return point


def checkpoint_now(tenant_id: int) -> AuditCheckpoint | None:
    """Sign a checkpoint of the tenant's chain as it ends now, unless the last one already covers it
    (`manage.py audit checkpoint`, the periodic task)."""
    with appending():
        head = lock_head(tenant_id)
        if head.events == head.checkpointed_events and head.checkpointed_at is not None:
            return None
        last = AuditEvent.objects.filter(tenant_id=tenant_id).order_by("-id").values_list("id", flat=True).first()
        if last is None:
            return None
        return write_checkpoint(head, last, timezone.now())


# --- Verifying ------------------------------------------------------------------------------------------


@dataclass
class Break:
    """The first place the chain does not hold: the event it names (None when the chain's end is missing)."""

    event_id: int | None
    at: datetime | None
    action: str
    problem: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "at": self.at.isoformat() if self.at else None,
            "action": self.action,
            "problem": self.problem,
        }


@dataclass
class Report:
    tenant_id: int
    events: int = 0
    checkpoints: int = 0
    broken: Break | None = None
    checked_at: datetime = field(default_factory=timezone.now)

    @property
    def intact(self) -> bool:
        return self.broken is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "intact": self.intact,
            "events": self.events,
            "checkpoints": self.checkpoints,
            "first_broken": self.broken.as_dict() if self.broken else None,
            "checked_at": self.checked_at.isoformat(),
        }


_VERIFY_FIELDS = (
    "id",
    "at",
    "actor_id",
    "actor_name",
    "action",
    "object_type",
    "object_id",
    "before",
    "after",
    "reason",
    "redacted_at",
    "prev_hash",
    "hash",
    "nonce",
    "before_commitment",
    "after_commitment",
    "reason_commitment",
)


def _event_rows(tenant_id: int) -> Iterator[tuple[Any, ...]]:
    """The tenant's events in chain order, their snapshots and reason as stored (sealed ones unopened: the
    commitments cover the stored form, lib.sealing)."""
    return (
        AuditEvent.objects.filter(tenant_id=tenant_id)
        .order_by("id")
        .values_list(*_VERIFY_FIELDS)
        .iterator(chunk_size=2000)
    )


def _link_problem(tenant_id: int, row: tuple[Any, ...], prev: str) -> str | None:
    (
        _,
        at,
        actor_id,
        actor_name,
        action,
        object_type,
        object_id,
        before,
        after,
        reason,
        redacted_at,
        prev_hash,
        stored_hash,
        nonce,
        before_c,
        after_c,
        reason_c,
    ) = row
    if not stored_hash:
        return "the event has no hash (written outside the audit writer)"
    if prev_hash != prev:
        return "its link to the previous event does not hold (an event before it was removed, added or rewritten)"
    if redacted_at is None:
        if not nonce:
            return "the event lost its commitment key without being redacted"
        for name, value, stored in (
            ("before", before, before_c),
            ("after", after, after_c),
            ("reason", reason, reason_c),
        ):
            if not hmac.compare_digest(commitment(nonce, value), stored):
                return f"its {name} was changed after it was written"
    expected = link_hash(
        tenant_id=tenant_id,
        at=at,
        actor_id=actor_id,
        actor_name=actor_name,
        action=action,
        object_type=object_type,
        object_id=object_id,
        before_commitment=before_c,
        after_commitment=after_c,
        reason_commitment=reason_c,
        prev_hash=prev_hash,
    )
    if not hmac.compare_digest(expected, stored_hash):
        return "its hash does not match its content (who, what, when or a commitment was changed)"
    return None


def verify_tenant(tenant_id: int) -> Report:
    """`_verify_tenant`, reading the events' snapshots and reasons as stored: the commitments cover the stored form
    (sealed under a fact's data key, lib.sealing), which still holds once a deletion destroyed that key."""
    with sealing.reading_stored():
        return _verify_tenant(tenant_id)


def _verify_tenant(tenant_id: int) -> Report:
    """Walk the tenant's chain (the caller acts for that tenant: tenancy.tenant_context) and its checkpoints.

    Checks, in the chain's order: each event's link to its predecessor, its unredacted values against their
    commitments, its hash; each checkpoint's signature (retired keys included), and that the event it names is
    still there with the hash and position it signed; finally that the chain ends where its head says. The
    first failure, in event order, is reported."""
    report = Report(tenant_id)
    checkpoints = list(
        AuditCheckpoint.objects.filter(tenant_id=tenant_id)
        .order_by("event_id", "id")
        .values_list("id", "event_id", "event_hash", "events", "at", "algorithm", "key_id", "signature")
    )
    report.checkpoints = len(checkpoints)
    by_event: dict[int, list[tuple[Any, ...]]] = {}
    for point in checkpoints:
        by_event.setdefault(int(point[1]), []).append(point)
    pending = sorted(by_event)
    prev = GENESIS
    count = 0
    last: tuple[Any, ...] | None = None
    for row in _event_rows(tenant_id):
        event_id = int(row[0])
        while pending and pending[0] < event_id:  # a checkpoint names an event that is no longer there
            missing = pending.pop(0)
            report.events = count
            report.broken = Break(
                missing, None, "", f"the event a signed checkpoint names (id {missing}) is missing from the chain"
            )
            return report
        count += 1
        problem = _link_problem(tenant_id, row, prev)
        if problem is None and pending and pending[0] == event_id:
            problem = _checkpoint_problem(tenant_id, row, count, by_event[pending.pop(0)])
        if problem is not None:
            report.events = count
            report.broken = Break(event_id, row[1], str(row[4]), problem)
            return report
        prev = row[12]
        last = row
    report.events = count
    if pending:
        missing = pending[0]
        report.broken = Break(
            missing, None, "", f"the event a signed checkpoint names (id {missing}) is missing from the chain"
        )
        return report
    head = AuditChainHead.objects.filter(tenant_id=tenant_id).values_list("last_hash", "events").first()
    head_hash, head_events = head if head is not None else (GENESIS, 0)
    if (head_hash or GENESIS) != prev or int(head_events) != count:
        report.broken = Break(
            int(last[0]) if last else None,
            last[1] if last else None,
            str(last[4]) if last else "",
            f"the chain ends here, after {count} events, but its head records {head_events} events ending in "
            "another hash (events at the end were removed or rewritten)",
        )
    return report


def _checkpoint_problem(
    tenant_id: int, row: tuple[Any, ...], position: int, points: list[tuple[Any, ...]]
) -> str | None:
    for _, event_id, event_hash, events, at, algorithm, key_id, signature in points:
        document = checkpoint_document(
            tenant_id=tenant_id, event_id=int(event_id), event_hash=event_hash, events=int(events), at=at
        )
        document.update(algorithm=algorithm, key_id=key_id, signature=signature)
        try:
            signing.verify(document)
        except SignatureInvalid as exc:
            return f"the signed checkpoint at this event does not verify: {exc}"
        if event_hash != row[12]:
            return "its hash is not the one the signed checkpoint at this event holds (the chain was rewritten)"
        if int(events) != position:
            return (
                f"the signed checkpoint at this event says it is event number {events} of the chain, but it is "
                f"number {position} (events before it were removed or added)"
            )
    return None
