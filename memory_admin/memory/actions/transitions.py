"""Valid-time transitions: accepted records whose validity has ended become history (a Celery beat task)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from memory_admin.memory import hooks, task_failures
from memory_admin.memory.models import MemoryRecord

Status = MemoryRecord.Status
logger = logging.getLogger(__name__)


def settle_valid_time_transitions(now: datetime | None = None) -> int:
    """Move accepted records whose validity has ended to `superseded` (a successor took over) or
    `expired` (none did). The belief did not change, so record time is left as it is.

    1. Only the ids of the rows due are read first: loading a whole row is what fails on a corrupt one.
    2. Each tenant's rows settle in their own transaction, so one tenant never holds back another.
    3. If a tenant's batch fails, its rows are retried one by one; a row that still fails is logged,
       recorded as a `task.failed` audit event (shown on the overview page) and skipped.
    """
    now = now or timezone.now()
    due = MemoryRecord.objects.filter(status=Status.ACCEPTED, valid_to__lte=now).order_by("tenant_id", "pk")
    by_tenant: dict[int, list[tuple[int, str]]] = {}
    for pk, tenant_id, memory_id in due.values_list("pk", "tenant_id", "memory_id"):
        by_tenant.setdefault(tenant_id, []).append((pk, memory_id))
    count = 0
    for tenant_id, due_rows in by_tenant.items():
        try:
            count += _settle_rows([pk for pk, _ in due_rows], now)
            continue
        except Exception:
            logger.warning("Valid-time transitions of tenant %s failed as a batch; settling row by row.", tenant_id)
        for pk, memory_id in due_rows:
            try:
                count += _settle_rows([pk], now)
            except Exception as exc:
                task_failures.record_failure(
                    tenant_id=tenant_id,
                    task="settle_valid_time_transitions",
                    object_type="record",
                    object_id=memory_id,
                    error=exc,
                    now=now,
                )
    # The other half of the hand-over: records whose valid_from has passed get usable index entries.
    # Search already decides at query time; this keeps the index's stored flag true. The derived stores do
    # it from their hook; a failing hook is logged, never fatal here.
    hooks.valid_time_settled(now)
    return count


def _settle_rows(pks: list[int], now: datetime) -> int:
    """Settle the rows `pks` (of one tenant) that are still accepted and past their validity, in one
    transaction."""
    with transaction.atomic():
        ended = list(
            MemoryRecord.objects.select_for_update().filter(pk__in=pks, status=Status.ACCEPTED, valid_to__lte=now)
        )
        if not ended:
            return 0
        successors = [r.pk for r in ended if r.superseded_by_id]
        count: int = MemoryRecord.objects.filter(pk__in=successors).update(status=Status.SUPERSEDED)
        count += MemoryRecord.objects.filter(pk__in=[r.pk for r in ended if not r.superseded_by_id]).update(
            status=Status.EXPIRED
        )
        hooks.belief_ended(ended, reason="Its validity ended.", now=now)
        hooks.records_changed(ended)
    return count
