"""Actions agents planned from deleted records: cancelled at acceptance, their payloads blanked at the purge."""

from __future__ import annotations

from datetime import datetime

from deletion.stores.base import Found, Job, Scope, Store, Verification
from memory_admin.derived.models import ActionBase, ScheduledAction
from memory_admin.lib import rows


class ScheduledActionsStore(Store):
    """Actions agents planned from deleted records: their payloads carry the values (a reminder's
    recipient, a message's text). At acceptance every read of them answers 410 (the API checks the
    tombstones of `derived_from`) and the live ones are cancelled; the purge blanks the payload and the
    status reason. The row stays, content-free, so the agent that planned it learns why it will not run."""

    name = "scheduled_actions"
    label = "Scheduled actions"
    ACTIVE = (ScheduledAction.Status.SCHEDULED, ScheduledAction.Status.SUSPENDED)

    @staticmethod
    def _redacted(job: Job) -> dict[str, str]:
        return {"redacted": job.redaction}

    def find(self, scope: Scope) -> Found:
        actions = ScheduledAction.objects.filter(
            tenant_id=scope.tenant_id, bases__record_id__in=rows.among(scope.record_ids)
        ).distinct()
        ids = sorted(actions.values_list("id", flat=True))
        return Found(len(ids), {"ids": ids}, list(actions.values_list("public_id", flat=True)[:5]))

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        # What `find` targets, joined to the scope's records through the base rows: two UPDATEs, no ids.
        planned = ScheduledAction.objects.filter(
            tenant_id=scope.tenant_id,
            id__in=ActionBase.objects.filter(record__in=scope.records_query()).values("action_id"),
        )
        planned.filter(status__in=self.ACTIVE).update(status=ScheduledAction.Status.CANCELLED, status_changed_at=now)
        return planned.update(
            status_reason=f"Withdrawn: planned from memory deleted by request {scope.request_public_id}."
        )

    def purge(self, job: Job) -> int:
        return (
            ScheduledAction.objects.filter(pk__in=rows.among(job.targets["ids"]))
            .exclude(payload=self._redacted(job))
            .update(payload=self._redacted(job), status_reason=job.redaction)
        )

    def verify(self, job: Job) -> Verification:
        targets = ScheduledAction.objects.filter(pk__in=rows.among(job.targets["ids"]))
        payloads = targets.exclude(payload=self._redacted(job)).count()
        active = targets.filter(status__in=self.ACTIVE).count()
        return Verification(
            payloads + active,
            {
                "check": "target actions cancelled, payload and reason blanked",
                "payloads_not_blanked": payloads,
                "still_active": active,
                "rows_kept_content_free": targets.count(),
            },
        )
