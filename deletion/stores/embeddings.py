"""The vector index: entries deleted, then compacted with old versions cleaned."""

from __future__ import annotations

from deletion.stores.base import Found, Job, Scope, Store, Verification, register
from deletion.stores.summaries import built_on
from memory_admin.derived.vectors import get_index, where_objects


@register
class EmbeddingsStore(Store):
    """The vector index: entries deleted, then compacted with old versions cleaned, so the verify step
    can show the data is physically gone from every version still on disk."""

    name = "embeddings"
    position = 30

    def find(self, scope: Scope) -> Found:
        summary_ids = list(built_on(scope).values_list("public_id", flat=True))
        entries = get_index().find(tenant_id=scope.tenant_id, object_ids=scope.memory_ids + summary_ids)
        return Found(len(entries), {"object_ids": scope.memory_ids + summary_ids}, [e.entry_id for e in entries[:5]])

    def purge(self, job: Job) -> int:
        index = get_index()
        removed = index.delete_where_object(job.tenant_id, job.targets["object_ids"])
        job.evidence["compaction"] = index.compact_and_cleanup()  # kept with the store row's evidence
        return removed

    def verify(self, job: Job) -> Verification:
        index = get_index()
        object_ids = job.targets["object_ids"]
        where = where_objects(job.tenant_id, object_ids) if object_ids else None
        in_any = index.rows_in_any_version(where) if where else 0
        return Verification(
            in_any,
            {
                "check": "rows matching the scope in every table version on disk",
                "where": where,
                "rows_in_any_version": in_any,
                "versions": index.versions(),
                "compaction": job.evidence.get("compaction"),
            },
        )
