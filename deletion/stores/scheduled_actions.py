"""Actions agents planned from deleted records: cancelled at acceptance, their payloads blanked at the purge."""

from __future__ import annotations

from datetime import datetime

from deletion.stores.base import Found, Job, Scope, Store, Verification
from deletion.stores.keys import destroy_item_keys, item_keys_remaining
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
        found = sorted(actions.values_list("id", "project_id", "public_id"))
        ids = [pk for pk, _, _ in found]
        # `keyed`: whose sealing keys the purge destroys (lib.sealing.item_fact), as [project id, public id].
        targets = {"ids": ids, "keyed": [[p, public] for _, p, public in found]}
        return Found(len(ids), targets, list(actions.values_list("public_id", flat=True)[:5]))

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
        blanked = (
            ScheduledAction.objects.filter(pk__in=rows.among(job.targets["ids"]))
            .exclude(payload=self._redacted(job))
            .update(payload=self._redacted(job), status_reason=job.redaction)
        )
        # The payloads' old copies (dead tuples, WAL, backups) become ciphertext nobody can open.
        destroy_item_keys(job.tenant_id, "action", job.targets.get("keyed", []))
        return blanked

    def verify(self, job: Job) -> Verification:
        targets = ScheduledAction.objects.filter(pk__in=rows.among(job.targets["ids"]))
        payloads = targets.exclude(payload=self._redacted(job)).count()
        active = targets.filter(status__in=self.ACTIVE).count()
        keys = item_keys_remaining(job.tenant_id, "action", job.targets.get("keyed", []))
        return Verification(
            payloads + active + keys,
            {
                "check": "target actions cancelled, payload and reason blanked, their sealing keys destroyed",
                "keys_remaining": keys,
                "payloads_not_blanked": payloads,
                "still_active": active,
                "rows_kept_content_free": targets.count(),
            },
        )
