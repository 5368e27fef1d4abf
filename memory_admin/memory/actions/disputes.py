"""Disputes (rule 3, step 5): reading one, and resolving it, with a winner or by excluding every candidate."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit, hooks
from memory_admin.memory.actions.curation import _require_curator, _require_reason
from memory_admin.memory.actions.fact_writes import _cut_overlapping
from memory_admin.memory.actions.facts import lock_fact
from memory_admin.memory.errors import InvalidInput, InvalidState, NotFound
from memory_admin.memory.models import Dispute, MemoryRecord

Status = MemoryRecord.Status


def get_dispute(principal: Principal, public_id: str, *, for_update: bool = False) -> Dispute:
    qs = Dispute.objects.filter(tenant_id=principal.tenant_pk)
    if for_update:
        qs = qs.select_for_update()
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
        _settle_candidates(principal, dispute, candidates, chosen, reason=reason, exclude_all=exclude_all, now=now)
        if chosen is not None:
            _cut_overlapping(chosen, now)
        hooks.records_changed(candidates)
        _close_dispute(principal, dispute, chosen, reason=reason, exclude_all=exclude_all, now=now)
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
) -> None:
    with audit.changing(
        dispute,
        tenant=dispute.tenant_id,
        object_type="dispute",
        object_id=dispute.public_id,
        actor=principal,
        action=audit.Action.DISPUTE_RESOLVED,
        reason=reason,
        at=now,
    ) as event:
        dispute.status = Dispute.Status.RESOLVED
        dispute.resolved_at = now
        dispute.resolved_by = principal
        dispute.winner = chosen
        dispute.resolution_reason = reason
        dispute.save()
        event.after = {"winner": chosen.memory_id if chosen else None, "exclude_all": exclude_all}
