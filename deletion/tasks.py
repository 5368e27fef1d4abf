"""Celery tasks that carry a deletion across the stores. State lives in the database; tasks take ids.

acks_late and reject-on-worker-lost are set globally, so a worker killed mid-purge leaves its message
to be redelivered; a lease keeps two workers off one store row; adapters are idempotent; a failure in
one store never stops the others; the reconciler requeues rows whose lease expired.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from deletion import stores
from deletion.models import DeletionRequest, StoreProgress
from deletion.service import find_pending, finish_if_verified
from deletion.stores import job_for
from memory_admin.accounts.tenancy import for_each_tenant
from memory_admin.memory import audit, task_failures

MAX_ATTEMPTS = 8
OPEN = (StoreProgress.State.PENDING, StoreProgress.State.FAILED, StoreProgress.State.WAITING)


@shared_task
def run_request(request_id: int) -> int:
    """Start every store of a request that is not verified yet."""
    ids = list(
        StoreProgress.objects.filter(request_id=request_id).exclude(state="verified").values_list("id", flat=True)
    )
    for progress_id in ids:
        purge_store.delay(progress_id)
    return len(ids)


def _claim(progress_id: int) -> bool:
    now = timezone.now()
    claimed = (
        StoreProgress.objects.filter(pk=progress_id)
        .filter(Q(state__in=OPEN) | Q(state=StoreProgress.State.RUNNING, lease_until__lt=now))
        .update(
            state=StoreProgress.State.RUNNING,
            lease_until=now + timedelta(seconds=settings.DELETION_LEASE_SECONDS),
            attempts=F("attempts") + 1,
        )
    )
    return claimed == 1


@shared_task(bind=True, max_retries=MAX_ATTEMPTS)
def purge_store(self: Any, progress_id: int) -> str:
    """Purge one store of one request, then read the store again to verify; set the stages only when
    every store is verified. The first to start finds the targets of every store that waited for the purge
    (`find_pending`), before any store purges."""
    if not _claim(progress_id):
        return "not claimed"
    progress = StoreProgress.objects.select_related("request", "request__project").get(pk=progress_id)
    request = progress.request
    DeletionRequest.objects.filter(pk=request.pk, state=DeletionRequest.State.ACCEPTED).update(
        state=DeletionRequest.State.PURGING
    )
    store = stores.get(progress.store)
    try:
        if find_pending(request.pk):
            progress.refresh_from_db(fields=["targets", "found", "evidence"])
        job = job_for(progress)
        purged = store.purge(job)
        if settings.DELETION_DRILL_PAUSE_SECONDS:  # fault drills: a window to kill the worker mid-purge
            time.sleep(settings.DELETION_DRILL_PAUSE_SECONDS)
        verification = store.verify(job)
    except Exception as exc:
        StoreProgress.objects.filter(pk=progress_id).update(
            state=StoreProgress.State.FAILED, last_error=f"{type(exc).__name__}: {exc}"[:2000], lease_until=None
        )
        if self.request.retries < self.max_retries:
            raise self.retry(countdown=min(2 ** (self.request.retries + 1), 300), exc=exc) from None
        return "failed"
    now = timezone.now()
    evidence = {**job.evidence, **verification.evidence}  # what the purge added, then the verification
    if verification.remaining == 0 and not verification.waiting:
        state, error = StoreProgress.State.VERIFIED, ""
    elif verification.waiting:
        state, error = StoreProgress.State.WAITING, ""
    else:
        state, error = StoreProgress.State.FAILED, f"Verification found {verification.remaining} remaining."
    StoreProgress.objects.filter(pk=progress_id).update(
        state=state,
        purged=F("purged") + purged,
        remaining=verification.remaining,
        last_error=error,
        lease_until=None,
        evidence=evidence,
        verified_at=now if state == StoreProgress.State.VERIFIED else None,
    )
    if state == StoreProgress.State.FAILED and self.request.retries < self.max_retries:
        raise self.retry(countdown=min(2 ** (self.request.retries + 1), 300))
    finish_if_verified(request.pk)
    return str(state)


@shared_task
def reconcile_deletions() -> int:
    """Beat task: requeue store rows that wait, failed, or whose worker's lease ran out; and re-check
    recently confirmed requests, re-opening a store if anything came back. Tenant by tenant, under
    row-level security (accounts.tenancy.for_each_tenant); each requeued message carries its tenant."""
    now = timezone.now()
    return sum(_reconcile_tenant(now) for _ in for_each_tenant("reconcile_deletions"))


def _reconcile_tenant(now: Any) -> int:
    stuck = StoreProgress.objects.filter(
        Q(
            state__in=(StoreProgress.State.PENDING, StoreProgress.State.FAILED, StoreProgress.State.WAITING),
            lease_until__isnull=True,
        )
        | Q(state=StoreProgress.State.RUNNING, lease_until__lt=now)
    ).exclude(request__state=DeletionRequest.State.AWAITING_APPROVAL)
    ids = list(stuck.values_list("id", flat=True)[:500])
    for progress_id in ids:
        purge_store.delay(progress_id)
    return len(ids) + recheck_confirmed(now)


def recheck_confirmed(now: Any) -> int:
    """Verify again the stores of requests confirmed in the last week; a store holding the data again
    (a job that wrote after the purge) is re-opened and the request leaves purge_confirmed."""
    reopened = 0
    recent = DeletionRequest.objects.filter(purge_confirmed_at__gte=now - timedelta(days=7))
    for progress in StoreProgress.objects.filter(request__in=recent, state=StoreProgress.State.VERIFIED).select_related(
        "request", "request__project"
    ):
        if progress.verified_at and progress.verified_at > now - timedelta(minutes=30):
            continue
        try:
            verification = stores.get(progress.store).verify(job_for(progress))
        except Exception as exc:
            # One store that cannot be read now must not stop the re-check of every other request.
            task_failures.record_failure(
                tenant_id=progress.request.tenant_id,
                task="reconcile_deletions",
                object_type="deletion",
                object_id=progress.request.public_id,
                error=exc,
            )
            continue
        if verification.remaining == 0:
            StoreProgress.objects.filter(pk=progress.pk).update(verified_at=now)
            continue
        with (
            transaction.atomic(),
            audit.changing(
                progress.request,
                tenant=progress.request.tenant_id,
                object_type="deletion",
                object_id=progress.request.public_id,
                actor=None,
                action=audit.Action.DELETION_REOPENED,
                reason=f"{progress.store}: {verification.remaining} found again",
            ),
        ):
            StoreProgress.objects.filter(pk=progress.pk).update(
                state=StoreProgress.State.PENDING,
                remaining=verification.remaining,
                last_error=f"Re-check found {verification.remaining} again; purging again.",
            )
            DeletionRequest.objects.filter(pk=progress.request_id).update(
                state=DeletionRequest.State.PURGING, purge_confirmed_at=None, backups_expire_at=None
            )
        purge_store.delay(progress.pk)
        reopened += 1
    return reopened
