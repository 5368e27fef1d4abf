"""Disputes (rule 3, step 5): reading one, resolving it (with a winner or by excluding every candidate), and
undoing a resolution for a short while after it (reopening the dispute, the answer before it restored).

Undo needs to know what the resolution changed: `resolve_dispute` keeps each changed record's state before and after
(the fields it touches) in its `dispute.resolved` audit event (`after["restorable"]`), in the same transaction.
`reopen_dispute` puts those records back as they were, only while every one is still as the resolution left it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit, hooks
from memory_admin.memory.actions.curation import _require_curator, _require_reason
from memory_admin.memory.actions.fact_writes import _cut_overlapping
from memory_admin.memory.actions.facts import lock_fact
from memory_admin.memory.errors import InvalidInput, InvalidState, NotFound
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord

Status = MemoryRecord.Status


def get_dispute(principal: Principal, public_id: str, *, for_update: bool = False) -> Dispute:
    qs = Dispute.objects.filter(tenant_id=principal.tenant_pk)
    if for_update:  # the dispute's row only: see curation.get_record
        qs = qs.select_for_update(of=("self",))
    dispute = qs.select_related("project").filter(public_id=public_id).first()
    if dispute is None:
        raise NotFound(f"No dispute {public_id!r}.")
    return dispute


def resolve_dispute(
    principal: Principal,
    public_id: str,
    *,
    winner: str | None,
    reason: str,
    exclude_all: bool = False,
    now: datetime | None = None,
) -> Dispute:
    """Settle a dispute: the winner becomes the current belief, the others stay as history.

    With `exclude_all`, every candidate is excluded instead (neither may be handed to an agent).
    """
    _require_curator(principal)
    reason = _require_reason(reason)
    if bool(winner) == bool(exclude_all):
        raise InvalidInput({"winner": ["Name the winning memory_id, or set exclude_all (not both)."]})
    now = now or timezone.now()
    with transaction.atomic():
        dispute = _lock_open_dispute(principal, public_id)
        candidates = list(dispute.candidates.select_for_update().order_by("revision"))
        chosen = _chosen_candidate(candidates, winner)
        # The fact's accepted records the winner may cut, locked, and every record's state before: for undo.
        accepted = (
            list(
                MemoryRecord.objects.select_for_update()
                .for_fact(dispute.project, dispute.subject_id, dispute.predicate)
                .filter(status=Status.ACCEPTED)
            )
            if chosen is not None
            else []
        )
        before = {r.memory_id: undo_state(r) for r in [*candidates, *accepted]}
        _settle_candidates(principal, dispute, candidates, chosen, reason=reason, exclude_all=exclude_all, now=now)
        cut = _cut_overlapping(chosen, now, accepted=accepted) if chosen is not None else []
        hooks.records_changed(candidates)
        # As the database now holds them (a bulk update cleared the fact's head flags beside the saved rows).
        changed = MemoryRecord.objects.select_related("superseded_by").filter(
            pk__in=[r.pk for r in [*candidates, *cut]]
        )
        restorable = [
            {"memory_id": r.memory_id, "before": before[r.memory_id], "after": undo_state(r)}
            for r in sorted(changed, key=lambda r: r.revision)
        ]
        _close_dispute(
            principal, dispute, chosen, reason=reason, exclude_all=exclude_all, now=now, restorable=restorable
        )
    return dispute


def _lock_open_dispute(principal: Principal, public_id: str) -> Dispute:
    """The open dispute, locked, with its fact locked too (no write to the fact slips in meanwhile)."""
    dispute = get_dispute(principal, public_id, for_update=True)
    if dispute.status != Dispute.Status.OPEN:
        raise InvalidState("This dispute is already resolved.")
    lock_fact(dispute.tenant_id, dispute.project.key, dispute.subject_id, dispute.predicate)
    return dispute


def _chosen_candidate(candidates: list[MemoryRecord], winner: str | None) -> MemoryRecord | None:
    chosen = next((c for c in candidates if c.memory_id == winner), None)
    if winner and chosen is None:
        raise InvalidInput({"winner": [f"{winner!r} is not a candidate of this dispute."]})
    return chosen


def _settle_candidates(
    principal: Principal,
    dispute: Dispute,
    candidates: list[MemoryRecord],
    chosen: MemoryRecord | None,
    *,
    reason: str,
    exclude_all: bool,
    now: datetime,
) -> None:
    """Give each candidate its final status (excluded, the winner accepted, the others superseded)."""
    facts = MemoryRecord.objects.for_fact(dispute.project, dispute.subject_id, dispute.predicate)
    facts.filter(is_head=True).update(is_head=False)
    # The winner is saved last, after every other head flag is cleared.
    candidates.sort(key=lambda record: record is chosen)
    for record in candidates:
        with audit.changing(
            record, actor=principal, action=audit.Action.RECORD_DISPUTE_RESOLVED, reason=reason, at=now
        ):
            if exclude_all:
                record.status = Status.EXCLUDED
                record.is_head = record.entered_current
            elif record is chosen:
                record.status = Status.ACCEPTED
                record.entered_current = record.is_head = True
            else:
                assert chosen is not None
                _supersede_candidate(record, chosen, now)
            record.status_reason = reason
            record.save()


def _supersede_candidate(record: MemoryRecord, chosen: MemoryRecord, now: datetime) -> None:
    """A losing candidate: history, superseded by the winner; if it was ever believed, its belief ends now."""
    record.status = Status.SUPERSEDED
    record.is_head = False
    record.superseded_by = chosen
    if record.entered_current:
        record.recorded_to = now
        record.valid_to_recorded_at = now
        cut = max(record.valid_from, chosen.valid_from)
        record.valid_to = min(record.valid_to or cut, cut)


def _close_dispute(
    principal: Principal,
    dispute: Dispute,
    chosen: MemoryRecord | None,
    *,
    reason: str,
    exclude_all: bool,
    now: datetime,
    restorable: list[dict[str, Any]],
) -> None:
    with _changing_dispute(dispute, principal, audit.Action.DISPUTE_RESOLVED, reason=reason, now=now) as event:
        dispute.status = Dispute.Status.RESOLVED
        dispute.resolved_at = now
        dispute.resolved_by = principal
        dispute.winner = chosen
        dispute.resolution_reason = reason
        dispute.save()
        event.after = {
            "winner": chosen.memory_id if chosen else None,
            "exclude_all": exclude_all,
            "restorable": restorable,
        }


def _changing_dispute(
    dispute: Dispute, principal: Principal, action: audit.Action, *, reason: str, now: datetime
) -> AbstractContextManager[audit.Event]:
    """`audit.changing` for a dispute: its one audited change, by `principal`, at `now`."""
    return audit.changing(
        dispute,
        tenant=dispute.tenant_id,
        object_type="dispute",
        object_id=dispute.public_id,
        actor=principal,
        action=action,
        reason=reason,
        at=now,
    )


# --- Undo: reopening a resolved dispute ---------------------------------------------------------------

# The fields a resolution changes on a record (the candidates' and the records the winner cut), which undo restores.
_UNDO_FIELDS = (
    "status",
    "status_reason",
    "is_head",
    "entered_current",
    "valid_to",
    "valid_to_recorded_at",
    "recorded_to",
)


def _moment_text(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def undo_state(record: MemoryRecord) -> dict[str, Any]:
    """What a resolution may change on `record`, as JSON (datetimes as UTC ISO text; the successor by memory_id)."""
    state: dict[str, Any] = {}
    for name in _UNDO_FIELDS:
        value = getattr(record, name)
        state[name] = _moment_text(value) if isinstance(value, datetime) else value
    successor = record.superseded_by if record.superseded_by_id else None
    state["superseded_by"] = successor.memory_id if successor is not None else None
    return state


def undo_window() -> timedelta:
    """How long after a resolution it can be undone (settings.DISPUTE_UNDO_MINUTES)."""
    return timedelta(minutes=settings.DISPUTE_UNDO_MINUTES)


def undo_until(dispute: Dispute) -> datetime | None:
    """Until when the dispute's resolution can be undone (None: it is open)."""
    if dispute.status != Dispute.Status.RESOLVED or dispute.resolved_at is None:
        return None
    return dispute.resolved_at + undo_window()


def reopen_dispute(principal: Principal, public_id: str, *, reason: str = "", now: datetime | None = None) -> Dispute:
    """Undo a resolution: the dispute is open again and its records are as they were before it, so agents get what
    they got then (no value while it is disputed). Audited, record by record and for the dispute.

    Refused (InvalidState, nothing changed) after the undo window (settings.DISPUTE_UNDO_MINUTES), and when the fact
    changed since the resolution (a new value, a record expired, excluded or deleted): undo would overwrite that."""
    _require_curator(principal)
    reason = (reason or "").strip() or "The resolution was undone."
    now = now or timezone.now()
    with transaction.atomic():
        dispute = get_dispute(principal, public_id, for_update=True)
        until = undo_until(dispute)
        if until is None:
            raise InvalidState("This dispute is open; there is no resolution to undo.")
        minutes = settings.DISPUTE_UNDO_MINUTES
        if now > until:
            raise InvalidState(
                f"A resolution can be undone for {minutes} minute{'s' if minutes != 1 else ''} after it, and this "
                "one is older. Change the fact's value from its page instead."
            )
        lock_fact(dispute.tenant_id, dispute.project.key, dispute.subject_id, dispute.predicate)
        restorable = _restorable(dispute)
        records = {
            r.memory_id: r
            for r in MemoryRecord.objects.select_for_update(of=("self",))
            .select_related("superseded_by")
            .filter(tenant_id=dispute.tenant_id, memory_id__in=[e["memory_id"] for e in restorable])
        }
        facts = MemoryRecord.objects.for_fact(dispute.project, dispute.subject_id, dispute.predicate)
        newer = facts.filter(recorded_from__gt=dispute.resolved_at).exclude(memory_id__in=list(records)).exists()
        moved = [
            e for e in restorable if e["memory_id"] not in records or undo_state(records[e["memory_id"]]) != e["after"]
        ]
        if newer or moved:
            raise InvalidState(
                "The fact changed after the resolution (a new value, or a record expired, excluded or deleted), "
                "so undoing it would overwrite that change. Nothing was changed; the dispute stays resolved."
            )
        winner = dispute.winner
        _restore(principal, facts, records, restorable, reason=reason, now=now)
        if winner is not None:
            # The winner answered since the resolution; disputed again, it stops: copies built on it hear so.
            winner.refresh_from_db()
            hooks.belief_ended([winner], reason=f"Dispute reopened: {reason}", now=now)
        hooks.records_changed(list(records.values()))
        with _changing_dispute(dispute, principal, audit.Action.DISPUTE_REOPENED, reason=reason, now=now) as event:
            event.before = {
                "winner": winner.memory_id if winner else None,
                "resolved_at": _moment_text(dispute.resolved_at),
            }
            dispute.status = Dispute.Status.OPEN
            dispute.resolved_at = None
            dispute.resolved_by = None
            dispute.winner = None
            dispute.resolution_reason = ""
            dispute.save()
            event.after = {"status": Dispute.Status.OPEN.value}
    return dispute


def _restorable(dispute: Dispute) -> list[dict[str, Any]]:
    """What the dispute's latest resolution changed, from its audit event (`resolve_dispute`)."""
    event = (
        AuditEvent.objects.filter(
            tenant_id=dispute.tenant_id,
            object_type="dispute",
            object_id=dispute.public_id,
            action=audit.Action.DISPUTE_RESOLVED,
        )
        .order_by("-at", "-id")
        .first()
    )
    restorable = (event.after or {}).get("restorable") if event is not None else None
    if not isinstance(restorable, list) or not restorable:
        raise InvalidState("This resolution cannot be undone: it was made before undo was kept.")
    return restorable


def _restore(
    principal: Principal,
    facts: Any,
    records: dict[str, MemoryRecord],
    restorable: list[dict[str, Any]],
    *,
    reason: str,
    now: datetime,
) -> None:
    """Each record back to its state before the resolution; the head is saved last (one head per fact)."""
    facts.filter(is_head=True).update(is_head=False)
    successors = {
        r.memory_id: r
        for r in MemoryRecord.objects.filter(
            memory_id__in=[e["before"]["superseded_by"] for e in restorable if e["before"]["superseded_by"]]
        )
    }
    for entry in sorted(restorable, key=lambda e: bool(e["before"]["is_head"])):
        record = records[entry["memory_id"]]
        state = entry["before"]
        with audit.changing(
            record, actor=principal, action=audit.Action.RECORD_DISPUTE_REOPENED, reason=reason, at=now
        ):
            for name in _UNDO_FIELDS:
                value = state[name]
                if name in ("valid_to", "valid_to_recorded_at", "recorded_to") and value is not None:
                    value = datetime.fromisoformat(value)
                setattr(record, name, value)
            record.superseded_by = successors.get(state["superseded_by"]) if state["superseded_by"] else None
            record.save()
