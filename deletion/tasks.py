"""Celery tasks that carry a deletion across the stores. State lives in the database; tasks take ids.

acks_late and reject-on-worker-lost are set globally, so a worker killed mid-purge leaves its message
to be redelivered (by Redis after its visibility timeout); a lease keeps two workers off one store row; adapters
are idempotent; a failure in one store never stops the others; the reconciler requeues rows that wait or failed.

Faults (docs/operations.md "Faults"):
- A worker killed mid-purge: its lease is short (DELETION_LEASE_SECONDS) and renewed by a heartbeat thread while
  the store's work runs, so it runs out soon after the worker dies; the resume sweep (`resume_abandoned_stores`,
  every DELETION_RESUME_SECONDS) sends such a store to a live worker, without waiting for the broker to hand
  the dead worker's message out again.
- The database connection lost mid-store (a PostgreSQL restart): the failure is written back once a new
  connection answers (`_write_back`), and the store retried at once, not left `running` until its lease ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from deletion import stores
from deletion.models import DeletionRequest, StoreProgress
from deletion.service import find_pending, finish_if_verified
from deletion.stores import job_for
from memory_admin.accounts.tenancy import current_tenant_id, for_each_tenant, tenant_context
from memory_admin.lib import outages
from memory_admin.memory import audit, task_failures

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
# Pauses (seconds) before each try to write a store's failure back after the database connection was lost:
# about half a minute in all, the time a PostgreSQL restart takes.
WRITE_BACK_PAUSES = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
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


@contextmanager
def _lease_kept(progress_id: int, *, eager: bool) -> Iterator[None]:
    """Renew the store's lease every third of DELETION_LEASE_SECONDS while the block runs (a heartbeat thread
    with its own database connection, acting for the task's tenant), so a live worker keeps its store however
    long the purge takes and a dead one loses it within one lease. Not for a task run eagerly: it runs inside
    its caller (maybe in the caller's transaction, whose row lock the heartbeat would wait for), and no worker
    of its own can die."""
    if eager:
        yield
        return
    lease = settings.DELETION_LEASE_SECONDS
    tenant_id = current_tenant_id()
    done = threading.Event()

    def beat() -> None:
        try:
            with tenant_context(tenant_id):
                while not done.wait(lease / 3):
                    try:
                        StoreProgress.objects.filter(pk=progress_id, state=StoreProgress.State.RUNNING).update(
                            lease_until=timezone.now() + timedelta(seconds=lease)
                        )
                    except outages.DATABASE_ERRORS as exc:  # the database is away: try again at the next beat
                        log.warning("deletion lease not renewed (%s)", type(exc).__name__)
                        connection.close()
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"lease-{progress_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _drop_if_broken() -> None:
    """Close this thread's connection if it failed and no longer answers; the next query opens a new one. Not
    inside a transaction (a task run eagerly in its caller's): that one is the caller's to end."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


def _write_back(progress_id: int, **fields: Any) -> bool:
    """Write a store's outcome, reconnecting when the database connection was lost (tries for about half a
    minute); False if the database never answered (the lease then runs out and the resume sweep takes over)."""
    for attempt, pause in enumerate(WRITE_BACK_PAUSES):
        time.sleep(pause)
        if attempt or connection.errors_occurred:
            _drop_if_broken()
        try:
            StoreProgress.objects.filter(pk=progress_id).update(**fields)
        except outages.DATABASE_ERRORS:
            continue
        return True
    return False


def _purge_and_verify(progress: StoreProgress) -> tuple[int, Any, Any]:
    request = progress.request
    store = stores.get(progress.store)
    if find_pending(request.pk):
        progress.refresh_from_db(fields=["targets", "found", "evidence"])
    job = job_for(progress)
    purged = store.purge(job)
    drill_store = settings.DELETION_DRILL_STORE
    if settings.DELETION_DRILL_PAUSE_SECONDS and drill_store in ("", progress.store):
        time.sleep(settings.DELETION_DRILL_PAUSE_SECONDS)  # fault drills: a window to kill the worker mid-purge
    return purged, job, store.verify(job)


@shared_task(bind=True, max_retries=MAX_ATTEMPTS)
def purge_store(self: Any, progress_id: int) -> str:
    """Purge one store of one request, then read the store again to verify; set the stages only when
    every store is verified. The first to start finds the targets of every store that waited for the purge
    (`find_pending`), before any store purges."""
    try:
        claimed = _claim(progress_id)
    except outages.DATABASE_ERRORS as exc:
        # The database went away before the store was claimed (nothing of it done): try again shortly rather than
        # fail and wait for beat's reconcile sweep (found by `make soak`: 30 s after a PostgreSQL restart of 5 s).
        _drop_if_broken()
        raise self.retry(countdown=2, exc=exc) from None
    if not claimed:
        # A retry after the store was verified but before the request's stages were set (the connection was
        # lost in between) sets them now.
        request_id = StoreProgress.objects.filter(pk=progress_id, state=StoreProgress.State.VERIFIED).values_list(
            "request_id", flat=True
        )
        for verified_request in request_id:
            finish_if_verified(verified_request)
        return "not claimed"
    try:
        with _lease_kept(progress_id, eager=bool(self.request.is_eager)):
            progress = StoreProgress.objects.select_related("request", "request__project").get(pk=progress_id)
            DeletionRequest.objects.filter(pk=progress.request_id, state=DeletionRequest.State.ACCEPTED).update(
                state=DeletionRequest.State.PURGING
            )
            purged, job, verification = _purge_and_verify(progress)
    except Exception as exc:
        lost = outages.unavailable(exc) == "database"
        _write_back(
            progress_id,
            state=StoreProgress.State.FAILED,
            last_error=f"{type(exc).__name__}: {exc}"[:2000],
            lease_until=None,
        )
        if self.request.retries < self.max_retries:
            # A lost connection is retried at once (the database answered the write-back); other failures back off.
            countdown = 1 if lost else min(2 ** (self.request.retries + 1), 300)
            raise self.retry(countdown=countdown, exc=exc) from None
        return "failed"
    now = timezone.now()
    evidence = {**job.evidence, **verification.evidence}  # what the purge added, then the verification
    if verification.remaining == 0 and not verification.waiting:
        state, error = StoreProgress.State.VERIFIED, ""
    elif verification.waiting:
        state, error = StoreProgress.State.WAITING, ""
    else:
        state, error = StoreProgress.State.FAILED, f"Verification found {verification.remaining} remaining."
    written = _write_back(
        progress_id,
        state=state,
        purged=F("purged") + purged,
        remaining=verification.remaining,
        last_error=error,
        lease_until=None,
        evidence=evidence,
        verified_at=now if state == StoreProgress.State.VERIFIED else None,
    )
    if not written and self.request.retries < self.max_retries:
        raise self.retry(countdown=1)  # purging again is idempotent; the lease has run out by the next try
    if state == StoreProgress.State.FAILED and self.request.retries < self.max_retries:
        raise self.retry(countdown=min(2 ** (self.request.retries + 1), 300))
    try:
        finish_if_verified(progress.request_id)
    except outages.DATABASE_ERRORS as exc:
        _drop_if_broken()
        raise self.retry(countdown=1, exc=exc) from None  # the retry finds the store verified and finishes
    return str(state)


@shared_task
def resume_abandoned_stores() -> int:
    """Beat task (every DELETION_RESUME_SECONDS): send each store whose worker's lease ran out (a worker
    that died mid-purge stops renewing it) to a live worker, and set the stages of each request whose stores
    are all verified but whose stages were never set (the worker that verified the last store died before it
    set them; its message comes back only after the broker's visibility timeout). Cheap: two indexed reads per
    tenant."""
    now = timezone.now()
    resumed = 0
    for _ in for_each_tenant("resume_abandoned_stores"):
        ids = list(
            StoreProgress.objects.filter(state=StoreProgress.State.RUNNING, lease_until__lt=now).values_list(
                "id", flat=True
            )[:500]
        )
        for progress_id in ids:
            purge_store.delay(progress_id)
        resumed += len(ids)
        for request_id in _verified_but_unconfirmed():
            resumed += finish_if_verified(request_id)
    return resumed


def _verified_but_unconfirmed() -> list[int]:
    """The tenant's requests being purged whose every store is verified, with no stage 3 set yet."""
    open_store = StoreProgress.objects.filter(request=OuterRef("pk")).exclude(state=StoreProgress.State.VERIFIED)
    requests = DeletionRequest.objects.filter(state=DeletionRequest.State.PURGING, purge_confirmed_at__isnull=True)
    return list(requests.filter(~Exists(open_store)).values_list("id", flat=True)[:500])


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
