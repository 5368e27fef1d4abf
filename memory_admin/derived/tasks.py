"""Celery tasks of the derived stores: keep the vector index and summaries in step with the records.

A door: it imports the domain; the domain queues these tasks by name (`task_refs`).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

from celery import shared_task
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from memory_admin.derived import embedding
from memory_admin.derived.lineage import regenerate_summary
from memory_admin.derived.models import PendingVector, Propagation, Summary
from memory_admin.derived.vectors import VectorEntry, VectorIndex, get_index
from memory_admin.memory.models import MemoryRecord
from memory_admin.queueing import enqueue_batched_after_commit

logger = logging.getLogger(__name__)

# A process asks for an ANN index build at most this often (the task itself is idempotent).
ANN_CHECK_SECONDS = 300.0
_ann_checked_at: dict[int, float] = {}
_ann_checked_lock = threading.Lock()

# The Propagation action that marks a record's vector entry as refreshed once its valid_from passed.
CAME_INTO_EFFECT = "marked_usable"


def record_text(record: MemoryRecord) -> str:
    """The text a record's vector entry embeds (embedding.record_text)."""
    return embedding.record_text(record.subject_id, record.predicate, record.value)


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def refresh_record_vectors(memory_ids: list[str]) -> int:
    """Embed records (or re-mark them): each entry carries memory_id and revision, and is usable only
    while its record is the current belief (accepted and valid now: a successor not yet in effect is
    unusable, today's value stays usable until the hand-over). Idempotent: it reads the records' state now.
    Then the records' `PendingVector` marks are cleared: search finds them in the index from now on."""
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
    # The entries are in the index: search stops matching these records from the database (read-your-writes).
    PendingVector.objects.filter(record_id__in=[r.pk for r in records]).delete()
    try:
        queue_ann_index_build_if_due(get_index())
    except Exception:  # the entries are written; a failed size check must not fail (and retry) the refresh
        logger.warning("could not check whether the vector table needs an ANN index", exc_info=True)
    return len(records)


def queue_ann_index_build_if_due(index: VectorIndex, *, now: float | None = None) -> bool:
    """Queue `build_vector_ann_index` when the table has passed `VECTOR_ANN_MIN_ROWS` without an index
    (or with many rows added since). Checked at most every ANN_CHECK_SECONDS per process; returns
    whether the task was queued."""
    moment = time.monotonic() if now is None else now
    with _ann_checked_lock:
        last = _ann_checked_at.get(id(index))
        if last is not None and moment - last < ANN_CHECK_SECONDS:
            return False
        _ann_checked_at[id(index)] = moment
    if not index.needs_ann_index():
        return False
    build_vector_ann_index.delay()
    return True


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=3)
def build_vector_ann_index(force: bool = False) -> dict[str, Any] | None:
    """Build the ANN index (and the scalar indexes of the filter columns) once the vector table has
    `VECTOR_ANN_MIN_ROWS` rows, or add the rows written since to them. Idempotent; one build at a time per index folder (a second run returns None at once).
    `force` rebuilds whatever the size. Returns the index's description, or None when nothing was done."""
    index = get_index()
    if not force and not index.needs_ann_index():
        return None
    with index.ann_build_lock() as acquired:
        if not acquired:
            return None
        if force or index.ann_index() is None:
            return index.build_ann_index()
        return index.update_ann_index()


def mark_records_in_effect(now: datetime | None = None, *, limit: int = 5000) -> list[str]:
    """The other half of the valid-time transition: records asserted ahead of their `valid_from` (a rule
    effective tomorrow, a scheduled successor) start being the current belief when it passes.

    Their vector entries were written unusable ("not yet in effect"); this re-marks them, once per record:
    a Propagation row (vector, `marked_usable`) says it was done and shows on the fact page. Retrieval never
    waits for it — search decides at query time from the database — it keeps the index's stored flag true.
    Returns the memory ids whose entries are refreshed (after commit, by `refresh_record_vectors`).
    """
    now = now or timezone.now()
    done = Propagation.objects.filter(
        record=OuterRef("pk"), dependant_kind=Propagation.Kind.VECTOR, action=CAME_INTO_EFFECT
    )
    with transaction.atomic():
        due = list(
            MemoryRecord.objects.current(now)
            .filter(valid_from__gt=F("recorded_from"))
            .filter(~Exists(done))
            .select_for_update(skip_locked=True)  # a concurrent run takes other rows, never the same twice
            .only("pk", "tenant_id", "memory_id", "valid_from")
            .order_by("valid_from")[:limit]
        )
        Propagation.objects.bulk_create(
            [
                Propagation(
                    tenant_id=r.tenant_id,
                    record_id=r.pk,
                    dependant_kind=Propagation.Kind.VECTOR,
                    dependant_id=f"record:{r.memory_id}",
                    action=CAME_INTO_EFFECT,
                    at=now,
                    reason=f"Came into effect (valid from {r.valid_from.isoformat()}).",
                )
                for r in due
            ]
        )
        ids = [r.memory_id for r in due]
        if ids:
            enqueue_batched_after_commit(refresh_record_vectors, ids)
    return ids


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def embed_summaries(summary_ids: list[int]) -> int:
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
    regenerated = 0
    for summary in Summary.objects.filter(id__in=summary_ids).select_related("project", "created_by"):
        if regenerate_summary(summary) is not None:
            regenerated += 1
    embed_summaries.delay(summary_ids)  # re-mark the stale ones as unusable
    return regenerated
