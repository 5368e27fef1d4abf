"""The vector index: entries deleted, then compacted with old versions cleaned."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from deletion.stores.base import Found, Job, Scope, Store, Verification
from deletion.stores.summaries import built_on
from memory_admin.derived.vectors import get_index, where_objects


class EmbeddingsStore(Store):
    """The vector index: entries deleted, then compacted with old versions cleaned, so the verify step
    can show the data is physically gone from every version still on disk, index files included.

    The purge rewrites fragments that kept soft-deleted rows and rebuilds the ANN index (if the table
    has one) from the live rows; verify counts what could still hold a deleted row: matching rows in
    any retained version, index folders no retained version uses, and an ANN index built before the
    purge's deletion."""

    name = "embeddings"
    label = "Vector index"

    def find(self, scope: Scope) -> Found:
        summary_ids = list(built_on(scope).values_list("public_id", flat=True))
        entries = get_index().find(tenant_id=scope.tenant_id, object_ids=scope.memory_ids + summary_ids)
        return Found(len(entries), {"object_ids": scope.memory_ids + summary_ids}, [e.entry_id for e in entries[:5]])

    def purge(self, job: Job) -> int:
        index = get_index()
        job.evidence["deleted_at"] = timezone.now().isoformat()
        removed = index.delete_where_object(job.tenant_id, job.targets["object_ids"])
        job.evidence["compaction"] = index.compact_and_cleanup()  # kept with the store row's evidence
        return removed

    def verify(self, job: Job) -> Verification:
        index = get_index()
        object_ids = job.targets["object_ids"]
        where = where_objects(job.tenant_id, object_ids) if object_ids else None
        in_any = index.rows_in_any_version(where) if where else 0
        disk = index.disk_check()
        stale_dirs = len(disk["unreferenced_index_dirs"])
        stale_ann = int(_built_before(disk["ann_index"], job.evidence.get("deleted_at")))
        return Verification(
            in_any + stale_dirs + stale_ann,
            {
                "check": "rows matching the scope in every table version on disk; index files no version "
                "uses; the ANN index built after the deletion",
                "where": where,
                "rows_in_any_version": in_any,
                "versions": disk["versions"],
                "unreferenced_index_dirs": stale_dirs,
                "ann_index_built_before_deletion": bool(stale_ann),
                "ann_index": disk["ann_index"],
                "deletion_files": disk["deletion_files"],
                "compaction": job.evidence.get("compaction"),
            },
        )


def _built_before(ann: dict[str, Any] | None, deleted_at: str | None) -> bool:
    """Whether the ANN index predates the deletion (so its files may describe the deleted rows)."""
    if ann is None or not deleted_at:
        return False
    if not ann.get("created_at"):
        return True  # unknown build time: assume the worst
    return datetime.fromisoformat(ann["created_at"]) < datetime.fromisoformat(deleted_at)
