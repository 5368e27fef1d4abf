"""Celery tasks. They take ids, read state from the database, and call the domain functions."""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.tenancy import for_each_tenant, tenant_context
from memory_admin.memory import actions, audit_chain, planner_stats, rechecks, task_failures
from memory_admin.memory.models import MemoryRecord, RecheckAttempt

# A source that cannot be reached is retried this many times with growing pauses, then left for
# the next sweep after the claim lease.
RECHECK_RETRIES = 3


@shared_task
def settle_valid_time_transitions() -> int:
    """Beat task: records whose validity ended become superseded or expired (see actions). A row that
    cannot be settled is recorded and skipped there; it never stops the sweep for other rows or tenants.
    Tenant by tenant, under row-level security (accounts.tenancy.for_each_tenant)."""
    return sum(actions.settle_valid_time_transitions() for _ in for_each_tenant("settle_valid_time_transitions"))


@shared_task
def sweep_due_rechecks(limit: int = 500) -> int:
    """Beat task: claim records past `recheck_after` and enqueue one recheck each, after commit; up to
    `limit` per tenant, tenant by tenant (each recheck message carries its tenant)."""
    claimed = 0
    for tenant_id in for_each_tenant("sweep_due_rechecks"):
        with transaction.atomic():
            ids = rechecks.claim_due(limit=limit)
            transaction.on_commit(partial(_send_rechecks, tenant_id, ids))
        claimed += len(ids)
    return claimed


@shared_task
def checkpoint_audit_chains() -> int:
    """Beat task, every AUDIT_CHECKPOINT_MINUTES: sign a checkpoint at the end of each tenant's audit chain that
    grew since its last one (a busy chain is also signed every AUDIT_CHECKPOINT_EVERY events as it is written)."""
    return sum(
        audit_chain.checkpoint_now(tenant_id) is not None for tenant_id in for_each_tenant("checkpoint_audit_chains")
    )


def _send_rechecks(tenant_id: int, record_ids: list[int]) -> None:
    with tenant_context(tenant_id):  # an enclosing transaction may commit after the sweep left the tenant
        for record_id in record_ids:
            recheck_record.delay(record_id)


@shared_task(bind=True, max_retries=RECHECK_RETRIES)
def recheck_record(self: Any, record_id: int) -> str:
    try:
        with transaction.atomic():  # a row that cannot be loaded leaves the connection usable
            record = MemoryRecord.objects.select_related("project").filter(pk=record_id).first()
        # Today's value stays due while a successor is scheduled (it is no longer the head, but it is the
        # answer read for acting today); a record whose validity ended or that left `accepted` is skipped.
        if record is None or not record.kept_fresh_at(timezone.now()):
            rechecks.release_claim_of(record_id)
            return "skipped"
        attempt = rechecks.recheck_now(record, trigger=RecheckAttempt.Trigger.SWEEP)
    except Exception as exc:
        # A row that cannot be rechecked (corrupt legacy data, say) is shown to its tenant; its claim is
        # kept, so the sweep tries it again only after the claim's lease, and never blocks other rows.
        ids = MemoryRecord.objects.filter(pk=record_id).values_list("tenant_id", "memory_id").first()
        if ids is None:
            raise
        task_failures.record_failure(
            tenant_id=ids[0], task="recheck_record", object_type="record", object_id=ids[1], error=exc
        )
        return "failed"
    if attempt.outcome == RecheckAttempt.Result.SOURCE_UNAVAILABLE and self.request.retries < self.max_retries:
        raise self.retry(countdown=settings.RECHECK_RETRY_DELAY * 2**self.request.retries)
    return str(attempt.outcome)


@shared_task
def refresh_planner_statistics() -> list[str]:
    """After a large batch (queued by memory.batch): analyze the tables a large import grew, once enough rows
    changed (memory/planner_stats.py). No tenant: it reads and writes no tenant's rows."""
    return planner_stats.refresh()
