"""Summaries built on deleted records: deleted, or regenerated from the remaining bases only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from deletion.stores.base import Found, Job, Scope, Store, Verification
from deletion.stores.keys import destroy_item_keys, item_keys_remaining
from memory_admin.derived.lineage import REGENERATORS, BaseRef, create_summary, regenerate_from
from memory_admin.derived.models import Summary, SummaryBase
from memory_admin.lib import rows


def built_on(scope: Scope) -> Any:
    """Summaries with a base among the scope's records (through the indexed base rows)."""
    return Summary.objects.filter(
        tenant_id=scope.tenant_id, bases__record_id__in=rows.among(scope.record_ids)
    ).distinct()


class SummariesStore(Store):
    """Summaries built on deleted records: deleted, or regenerated from the remaining bases only."""

    name = "summaries"
    label = "Summaries"
    replayed = True

    def find(self, scope: Scope) -> Found:
        summaries = built_on(scope)
        found = list(summaries.values_list("id", "project_id", "public_id"))
        ids = [pk for pk, _, _ in found]
        return Found(
            len(ids),
            # `keyed`: whose sealing keys the purge destroys (lib.sealing.item_fact), as [project id, public id].
            {"ids": ids, "memory_ids": scope.memory_ids, "keyed": [[p, public] for _, p, public in found]},
            list(summaries.values_list("public_id", flat=True)[:5]),
        )

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        # What `built_on` finds, as one UPDATE joined to the scope's records through the base rows.
        uses = SummaryBase.objects.filter(record__in=scope.records_query()).values("summary_id")
        return Summary.objects.filter(tenant_id=scope.tenant_id, id__in=uses, hidden_at__isnull=True).update(
            hidden_at=now, status=Summary.Status.WITHDRAWN, status_reason=f"Deletion {scope.request_public_id}."
        )

    def purge(self, job: Job) -> int:
        deleted = set(job.targets["memory_ids"])
        targets = Summary.objects.filter(pk__in=rows.among(job.targets["ids"]))
        # Only a summary of a kind with a regenerator can be rebuilt from its remaining bases: those one by
        # one, first; then every target is deleted in one statement (and its base rows with it).
        for summary in targets.filter(kind__in=list(REGENERATORS)).select_related("project", "created_by"):
            remaining = [b for b in summary.derived_from if b["memory_id"] not in deleted]
            text = regenerate_from(summary, remaining)
            if text is not None:
                create_summary(
                    summary.created_by,
                    project_id=summary.project.key,
                    text=text,
                    kind=summary.kind,
                    bases=[BaseRef(b["memory_id"], b["revision"]) for b in remaining],
                )
        _, by_model = targets.delete()
        # Their texts' old copies (dead tuples, WAL, backups) become ciphertext nobody can open.
        destroy_item_keys(job.tenant_id, "summary", job.targets.get("keyed", []))
        return by_model.get(Summary._meta.label, 0)

    def verify(self, job: Job) -> Verification:
        remaining = Summary.objects.filter(pk__in=rows.among(job.targets["ids"])).count()
        # Anything written since the acceptance that names a deleted memory (a late job).
        deleted = set(job.targets["memory_ids"])
        since = Summary.objects.filter(tenant_id=job.tenant_id, created_at__gte=job.accepted_at)
        late = [
            s.public_id
            for s in since.only("public_id", "derived_from")
            if deleted & {b.get("memory_id") for b in s.derived_from}
        ]
        keys = item_keys_remaining(job.tenant_id, "summary", job.targets.get("keyed", []))
        return Verification(
            remaining + len(late) + keys,
            {
                "check": "target summaries gone and their sealing keys destroyed; none written since names a deleted "
                "memory",
                "target_rows": remaining,
                "keys_remaining": keys,
                "built_on_deleted_since": late[:20],
            },
        )
