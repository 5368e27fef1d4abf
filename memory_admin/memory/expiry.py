"""Expiry requests: the governed way for an agent to ask that a fact stop being used (rule 2b) when it may not
expire it itself.

An agent's delete through LangGraph's store or LangMem's tools lands here. Where the field's policy lets agents
expire their own facts (`FieldPolicy.agents_expire_own`, not on high-risk fields), `actions.expire_record` does it
at once. Otherwise the agent files a request: the record stays as it is (current, readable, used) until an owner or
admin approves it (the record expires, kept as history, with the request's reason) or declines it (with theirs).
One pending request per record: asking again returns the one already waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit
from memory_admin.memory.actions import expire_record, get_record, may_expire
from memory_admin.memory.actions.curation import _require_curator, _require_reason
from memory_admin.memory.errors import InvalidState, NotFound
from memory_admin.memory.models import ExpiryRequest, MemoryRecord

Status = ExpiryRequest.Status


@dataclass(frozen=True)
class Filed:
    """What `request_expiry` did: the request (new, or the one already pending) and whether it is new."""

    request: ExpiryRequest
    created: bool


def request_expiry(principal: Principal, memory_id: str, reason: str, *, now: datetime | None = None) -> Filed:
    """File a request that an owner expire the record. Refused (InvalidState) for a record that is not accepted
    (nothing to expire); a pending request of the same record is returned as it is."""
    reason = _require_reason(reason)
    now = now or timezone.now()
    with transaction.atomic():
        record = get_record(principal, memory_id, for_update=True)
        if not record.expirable:
            raise InvalidState(f"Only an accepted record can expire; this one is {record.status}.")
        pending = ExpiryRequest.objects.filter(record=record, status=Status.PENDING).first()
        if pending is not None:
            return Filed(pending, created=False)
        try:
            with transaction.atomic():
                request = ExpiryRequest.objects.create(
                    tenant_id=record.tenant_id, record=record, requested_by=principal, reason=reason, created_at=now
                )
        except IntegrityError:  # another call of the same agent filed it first (expiry_one_pending)
            return Filed(ExpiryRequest.objects.get(record=record, status=Status.PENDING), created=False)
        audit.record_event(
            tenant=record.tenant_id,
            actor=principal,
            action=audit.Action.RECORD_EXPIRY_REQUESTED,
            object_type="record",
            object_id=record.memory_id,
            after={"request": request.public_id, "revision": record.revision},
            reason=reason,
            at=now,
            fact=record.sealing_fact(),
        )
    return Filed(request, created=True)


def get_request(principal: Principal, request_id: str, *, for_update: bool = False) -> ExpiryRequest:
    """The tenant's request (its record a live one), or NotFound: a request of a deleted record is never shown."""
    qs = ExpiryRequest.objects.filter(tenant_id=principal.tenant_pk, public_id=str(request_id)[:64])
    qs = qs.filter(record__in=MemoryRecord.objects.for_tenant(principal.tenant_pk))
    if for_update:
        qs = qs.select_for_update(of=("self",))
    request = qs.select_related("record", "record__project", "requested_by", "decided_by").first()
    if request is None:
        raise NotFound(f"No expiry request {request_id!r}.")
    return request


def pending_requests(principal: Principal, *, status: str = Status.PENDING, limit: int = 200) -> list[ExpiryRequest]:
    """The tenant's requests in `status` (pending first come first), each with its record, for a curator."""
    _require_curator(principal)
    return list(
        ExpiryRequest.objects.filter(tenant_id=principal.tenant_pk, status=status)
        .filter(record__in=MemoryRecord.objects.for_tenant(principal.tenant_pk))
        .select_related("record", "record__project", "requested_by", "decided_by")
        .order_by("id")[:limit]
    )


def decide_expiry(
    principal: Principal, request_id: str, *, approve: bool, reason: str = "", now: datetime | None = None
) -> ExpiryRequest:
    """An owner's or admin's decision. Approving expires the record now with the request's reason (refused while
    the record is no longer accepted: decline it instead); declining needs the decider's reason."""
    _require_curator(principal)
    now = now or timezone.now()
    decision_reason = (reason or "").strip() if approve else _require_reason(reason)
    with transaction.atomic():
        request = get_request(principal, request_id, for_update=True)
        if request.status != Status.PENDING:
            raise InvalidState(f"This request was already {request.status}.")
        if approve:
            record = request.record
            if not record.expirable:
                raise InvalidState(
                    f"The record is {record.status} now, so there is nothing to expire: decline the request."
                )
            expire_record(principal, record.memory_id, decision_reason or request.reason, now=now)
        # Audited about the record (a deletion of it redacts the event too), with the request in `after`.
        with audit.changing(
            request,
            tenant=request.tenant_id,
            object_type="record",
            object_id=request.record.memory_id,
            actor=principal,
            action=audit.Action.RECORD_EXPIRY_APPROVED if approve else audit.Action.RECORD_EXPIRY_DECLINED,
            reason=decision_reason,
            at=now,
        ) as event:
            request.status = Status.APPROVED if approve else Status.DECLINED
            request.decided_at = now
            request.decided_by = principal
            request.decision_reason = decision_reason
            request.save(update_fields=["status", "decided_at", "decided_by", "decision_reason"])
            event.after = {"request": request.public_id, "requested_by": request.requested_by.name or "agent"}
    return request


__all__ = ["Filed", "decide_expiry", "get_request", "may_expire", "pending_requests", "request_expiry"]
