"""Curation by a person or an agent: exclude a record (rule 2a) or expire it (rule 2b), and the checks both share
(who may curate, a reason is required, the tenant's record or 404).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit, hooks, validation
from memory_admin.memory.errors import DisputeOpen, Forbidden, InvalidInput, InvalidState, NotFound
from memory_admin.memory.models import FieldPolicy, MemoryRecord
from memory_admin.memory.policies import policy_for

Status = MemoryRecord.Status


def _require_curator(principal: Principal) -> None:
    if not principal.can_curate:
        raise Forbidden("Only owners and admins may exclude, expire or resolve records.")


def _require_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput({"reason": ["Say why; the reason is kept in the audit log."]})
    return reason


def may_expire(principal: Principal, record: MemoryRecord) -> bool:
    """Whether the principal may expire the record itself: an owner or admin always; an agent when it asserted the
    record and the field's policy lets agents expire their own facts, on a field that is not high-risk."""
    if principal.can_curate:
        return True
    if not principal.has_role("agent") or record.issuer_id != principal.pk:
        return False
    policy = policy_for(record.tenant_id, record.project.key, record.predicate)
    return policy is not None and policy.agents_expire_own and policy.risk != FieldPolicy.Risk.HIGH


def get_record(principal: Principal, memory_id: str, *, for_update: bool = False) -> MemoryRecord:
    """The principal's tenant's record, or NotFound (another tenant's record is not revealed)."""
    qs = MemoryRecord.objects.for_tenant(principal.tenant_pk)
    if for_update:
        # The record's row only: FOR UPDATE over the select_related join would lock its project's row too, and a
        # concurrent write of the tenant, holding the audit chain's head, checks its foreign key to that project
        # (FOR KEY SHARE) at COMMIT: a deadlock, answered 503, found by `make soak`.
        qs = qs.select_for_update(of=("self",))
    record: MemoryRecord | None = qs.select_related("project").filter(memory_id=memory_id).first()
    if record is None:
        raise NotFound(f"No record {memory_id!r}.")
    return record


def exclude_record(principal: Principal, memory_id: str, reason: str, *, now: datetime | None = None) -> MemoryRecord:
    """Keep the record, but never hand it to an agent again (rule 2a)."""
    _require_curator(principal)
    reason = _require_reason(reason)
    now = now or timezone.now()
    with transaction.atomic():
        record = get_record(principal, memory_id, for_update=True)
        if record.status == Status.EXCLUDED:
            return record
        if not record.excludable:
            raise DisputeOpen("This record is part of an open dispute; resolve the dispute instead.")
        with audit.changing(record, actor=principal, action=audit.Action.RECORD_EXCLUDED, reason=reason, at=now):
            was_current = record.status == Status.ACCEPTED
            record.status = Status.EXCLUDED
            record.status_reason = reason
            record.save(update_fields=["status", "status_reason"])
            if was_current:
                hooks.belief_ended([record], reason=f"Excluded: {reason}", now=now)
            hooks.records_changed([record])
    return record


def expire_record(
    principal: Principal,
    memory_id: str,
    reason: str,
    *,
    valid_to: datetime | None = None,
    now: datetime | None = None,
) -> MemoryRecord:
    """End the record's validity (now, or at `valid_to`) and keep it as history (rule 2b). Owners and admins may;
    an agent only where the field's policy lets agents expire their own facts (`may_expire`)."""
    if not principal.can_curate and not principal.has_role("agent"):
        _require_curator(principal)
    reason = _require_reason(reason)
    validation.check_datetimes(valid_to=valid_to)
    now = now or timezone.now()
    with transaction.atomic():
        record = get_record(principal, memory_id, for_update=True)
        if not may_expire(principal, record):
            raise Forbidden(
                "Only owners and admins may expire this record, or an agent that asserted it where the field's "
                f"policy lets agents expire their own facts. File POST /api/v1/records/{memory_id}/expiry-requests/ "
                "for an owner to decide."
            )
        if not record.expirable:
            raise InvalidState(f"Only an accepted record can expire; this one is {record.status}.")
        end = max(record.valid_from, valid_to or now)
        if record.valid_to is not None and record.valid_to < end:
            raise InvalidInput({"valid_to": ["The record's validity already ends earlier."]})
        with audit.changing(record, actor=principal, action=audit.Action.RECORD_EXPIRED, reason=reason, at=now):
            record.valid_to = end
            record.valid_to_recorded_at = now
            record.status_reason = reason
            # Validity that ends later stays accepted until then, like a scheduled hand-over.
            if end <= now:
                record.status = Status.EXPIRED
            record.save(update_fields=["valid_to", "valid_to_recorded_at", "status", "status_reason"])
            if record.status == Status.EXPIRED:
                hooks.belief_ended([record], reason=f"Expired: {reason}", now=now)
                hooks.records_changed([record])
    return record
