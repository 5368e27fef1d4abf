"""The conformance suite as a Celery task (a door), started from the dashboard page."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.utils import timezone

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.conformance.models import ConformanceRun
from memory_admin.conformance.runner import product_failed, run_suite

log = logging.getLogger(__name__)


def summary_of(result: dict[str, Any]) -> dict[str, Any]:
    """What a run keeps: the counts and the cases, without each probe's record."""
    return {**result, "targets": [{k: v for k, v in t.items() if k != "probes"} for t in result["targets"]]}


@shared_task
def run_conformance(run_id: int, tenant_id: int) -> str:
    """Run the suite for the run `run_id` of tenant `tenant_id` (given explicitly: the run's row is a tenant
    row), reporting progress on the row as each case finishes. Started once: a run that is not queued is left
    alone."""
    with tenant_context(tenant_id):
        claimed = ConformanceRun.objects.filter(pk=run_id, tenant_id=tenant_id, status=ConformanceRun.Status.QUEUED)
        if not claimed.update(status=ConformanceRun.Status.RUNNING, started_at=timezone.now()):
            return "not queued"
        run = ConformanceRun.objects.get(pk=run_id)
        rows = ConformanceRun.objects.filter(pk=run_id, tenant_id=tenant_id)

        def progress(done: int, total: int, label: str) -> None:
            with tenant_context(tenant_id):
                rows.update(done=done, total=total, current=label[:200])

        try:
            result = run_suite(run.targets or "all", variants=run.variants, seed=run.seed, progress=progress)
        except Exception as exc:
            log.exception("conformance run %s failed", run_id)
            rows.update(status=ConformanceRun.Status.ERROR, error=type(exc).__name__, finished_at=timezone.now())
            return "error"
        status = ConformanceRun.Status.FAILED if product_failed(result) else ConformanceRun.Status.PASSED
        rows.update(status=status, result=summary_of(result), finished_at=timezone.now(), current="")
        return str(status)
