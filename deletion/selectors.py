"""Reads of deletion requests and tombstones that pages show, each in a fixed number of queries whatever the
number of rows. Selectors only read: who may act stays in deletion.service; nothing here writes."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet

from deletion import tombstones
from deletion.models import DeletionRequest, StoreProgress, Tombstone
from memory_admin.accounts.models import Principal


def needing_compliance(tenant_id: int, *, limit: int = 20) -> list[DeletionRequest]:
    """Requests waiting for a second approval, or under way with a failed store, the earliest due first; each
    with its project and `failed`, how many of its stores failed."""
    failing = Q(stores__state=StoreProgress.State.FAILED) & Q(
        state__in=[DeletionRequest.State.ACCEPTED, DeletionRequest.State.PURGING]
    )
    return list(
        DeletionRequest.objects.filter(tenant_id=tenant_id)
        .filter(Q(state=DeletionRequest.State.AWAITING_APPROVAL) | failing)
        .select_related("project")
        .annotate(failed=Count("stores", filter=Q(stores__state=StoreProgress.State.FAILED)))
        .order_by("due_by", "id")[:limit]
    )


def with_stores(requests: QuerySet[DeletionRequest], *, limit: int = 200) -> list[DeletionRequest]:
    """The first `limit` of `requests` with their stores (service.report lists them): two queries."""
    return list(requests.prefetch_related(Prefetch("stores", queryset=StoreProgress.objects.order_by("id")))[:limit])


def record_tombstones(tenant_id: int, memory_id: str) -> list[Tombstone]:
    """A deleted record's tombstones, newest first, and the one its deletion's rule will write (pending)."""
    written = list(
        Tombstone.objects.filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, memory_id=memory_id)
        .select_related("request__project")
        .order_by("-id")
    )
    return written + tombstones.pending_record_stones(tenant_id, memory_ids=[memory_id])


def fact_tombstones(tenant_id: int, project: str, subject: str, predicate: str) -> list[Tombstone]:
    """The tombstones of a deleted fact's records, newest first, and those its deletion's rule will write."""
    scope = tombstones.fact_scope(tenant_id, project, subject, predicate)
    written = list(
        Tombstone.objects.filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, scope_hash=scope)
        .select_related("request__project")
        .order_by("-id")
    )
    return written + tombstones.pending_record_stones(tenant_id, facts=[(project, subject, predicate)])


def tombstone(principal: Principal, tombstone_id: int) -> Tombstone | None:
    return Tombstone.objects.filter(tenant_id=principal.tenant_pk, pk=tombstone_id).first()
