"""Agents' loaded contexts: a notice per loaded copy, verified when every holder acknowledged."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from deletion.stores.base import NOTICE_REASON, Found, Job, Scope, Store, Verification
from memory_admin.derived.models import ContextItem, Invalidation
from memory_admin.lib import rows


class ContextsStore(Store):
    """Agents' loaded contexts: a notice per loaded copy; verified when every holder acknowledged or its
    session expired."""

    name = "contexts"
    label = "Agents' contexts"

    def find(self, scope: Scope) -> Found:
        items = ContextItem.objects.filter(record_id__in=rows.among(scope.record_ids)).select_related("load")
        loads = sorted({i.load_id for i in items})
        return Found(
            len(loads), {"loads": loads, "memory_ids": scope.memory_ids}, sorted({i.load.public_id for i in items})[:5]
        )

    @staticmethod
    def _notices(job: Job) -> Any:
        return Invalidation.objects.filter(
            load_id__in=rows.among(job.targets["loads"]), memory_id__in=rows.among(job.targets["memory_ids"])
        )

    def purge(self, job: Job) -> int:
        # A notice repeats the reason of the change that sent it ("Excluded: <a person's words>"), which
        # may quote the deleted value. The notice stays (its holder must still acknowledge it); its reason
        # becomes the deletion's.
        reason = NOTICE_REASON.format(request=job.request_public_id)
        changed: int = self._notices(job).exclude(reason=reason).update(reason=reason)
        return changed

    def verify(self, job: Job) -> Verification:
        now = timezone.now()
        waiting = (
            self._notices(job)
            .filter(acknowledged_at__isnull=True, load__expires_at__gt=now)
            .select_related("agent", "load")
        )
        holders = sorted({f"{n.agent.name}/{n.load.session_id}" for n in waiting})
        reasons = self._notices(job).exclude(reason=NOTICE_REASON.format(request=job.request_public_id)).count()
        return Verification(
            len(holders) + reasons,
            {
                "holders_not_acknowledged": holders,
                "loads": len(job.targets["loads"]),
                "notice_reasons_not_replaced": reasons,
            },
            waiting=bool(holders) and not reasons,
        )
