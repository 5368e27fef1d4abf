"""Failures of background tasks on one object, kept where the tenant's owners and admins see them.

A sweep over many rows (valid-time transitions, rechecks, deletion reconciliation) must not stop for
everyone because one row cannot be processed. It logs the failure, records it here and moves on. The
record is an audit event with its own action (`task.failed`), in the tenant of the row, so it shows on
the overview page and in the audit log; the same task failing on the same object is recorded at most
once a day, however often the sweep runs.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from memory_admin.memory import audit
from memory_admin.memory.models import AuditEvent

logger = logging.getLogger(__name__)

FAILED_ACTION = audit.Action.TASK_FAILED
REPEAT_AFTER = timedelta(days=1)


def record_failure(
    *,
    tenant_id: int,
    task: str,
    object_type: str,
    object_id: str,
    error: BaseException,
    now: datetime | None = None,
) -> bool:
    """Log `error` and keep it as a `task.failed` audit event of the tenant; False when the same failure
    was already recorded within REPEAT_AFTER. Never raises: the sweep that calls it must go on."""
    now = now or timezone.now()
    detail = f"{type(error).__name__}: {error}"
    # The log gets the exception's type only (its message may quote content; docs/operations.md "What is logged"); the
    # message is kept in the tenant's task.failed audit event.
    logger.error("%s failed on %s %s (tenant %s): %s", task, object_type, object_id, tenant_id, type(error).__name__)
    try:
        with transaction.atomic():
            seen = AuditEvent.objects.filter(
                tenant_id=tenant_id,
                object_type=object_type,
                object_id=object_id[:64],
                action=FAILED_ACTION,
                reason__startswith=f"{task}:",
                at__gte=now - REPEAT_AFTER,
            ).exists()
            if seen:
                return False
            audit.record_event(
                tenant=tenant_id,
                actor=None,
                action=FAILED_ACTION,
                object_type=object_type[:32],
                object_id=object_id[:64],
                reason=f"{task}: {detail}"[:2000],
                after={"task": task, "error": detail[:2000]},
                at=now,
            )
    except Exception:
        logger.exception("Could not record the failure of %s on %s %s", task, object_type, object_id)
        return False
    return True


def recent_failures(tenant_id: int, *, days: int = 7) -> QuerySet[AuditEvent]:
    """The tenant's task failures of the last `days` days, newest first."""
    since = timezone.now() - timedelta(days=days)
    return AuditEvent.objects.filter(tenant_id=tenant_id, action=FAILED_ACTION, at__gte=since).order_by("-id")
