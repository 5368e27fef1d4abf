"""Celery tasks of the derived stores: keep the vector index and summaries in step with the records."""

from __future__ import annotations

from celery import shared_task

from memory_admin.derived.models import Summary
from memory_admin.memory.models import MemoryRecord


def record_text(record: MemoryRecord) -> str:
    return f"{record.subject_id} {record.predicate}: {record.value}"


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def refresh_record_vectors(memory_ids: list[str]) -> int:
    """Embed records (or re-mark them): each entry carries memory_id and revision, and is usable only
    while its record is the current belief. Idempotent: it reads the records' state now."""
    from django.utils import timezone

    from memory_admin.derived.vectors import VectorEntry, get_index

    # The live manager leaves out tombstoned records, so a refresh queued before a deletion and run
    # after it cannot bring a deleted memory back into the index.
    records = list(MemoryRecord.objects.filter(memory_id__in=memory_ids).select_related("project"))
    if not records:
        return 0
    now = timezone.now()
    get_index().upsert(
        [
            VectorEntry(
                entry_id=f"record:{r.memory_id}",
                tenant_id=r.tenant_id,
                project_id=r.project.key,
                kind="record",
                object_id=r.memory_id,
                revision=r.revision,
                text=record_text(r),
                usable=r.is_current_at(now),
            )
            for r in records
        ]
    )
    return len(records)


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def embed_summaries(summary_ids: list[int]) -> int:
    from memory_admin.derived.vectors import VectorEntry, get_index

    summaries = list(Summary.objects.filter(id__in=summary_ids, hidden_at__isnull=True).select_related("project"))
    get_index().upsert(
        [
            VectorEntry(
                entry_id=f"summary:{s.public_id}",
                tenant_id=s.tenant_id,
                project_id=s.project.key,
                kind="summary",
                object_id=s.public_id,
                revision=1,
                text=s.text,
                usable=s.status == Summary.Status.CURRENT,
            )
            for s in summaries
        ]
    )
    return len(summaries)


@shared_task
def regenerate_summaries(summary_ids: list[int]) -> int:
    """Stale summaries whose kind has a regenerator are rebuilt from their current bases; their old
    vector entries stop being usable."""
    from memory_admin.derived.lineage import regenerate_summary  # lineage builds on memory.actions

    regenerated = 0
    for summary in Summary.objects.filter(id__in=summary_ids).select_related("project", "created_by"):
        if regenerate_summary(summary) is not None:
            regenerated += 1
    embed_summaries.delay(summary_ids)  # re-mark the stale ones as unusable
    return regenerated
