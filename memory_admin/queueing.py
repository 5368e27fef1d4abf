"""Enqueueing Celery work after commit, so a task never sees a row that was rolled back."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)


def enqueue_after_commit(task: Any, *args: Any) -> None:
    """`task.delay(*args)` once the transaction commits.

    The change is already committed when this runs, so a broker that cannot be reached must not turn the
    request into an error: the failure is logged. Every task reads its state from the database, so the
    work can be redone: the recheck sweep finds due records again, and `manage.py reindex_vectors`
    rebuilds vector entries from the records.
    """

    def send() -> None:
        try:
            task.delay(*args)
        except Exception:
            log.exception("Could not enqueue %s%r; a periodic sweep will redo it", getattr(task, "name", task), args)

    transaction.on_commit(send)


class _Batch:
    def __init__(self, task: Any) -> None:
        self.task = task
        self.items: list[Any] = []

    def flush(self) -> None:
        try:
            self.task.delay(sorted(set(self.items)))
        except Exception:
            log.exception(
                "Could not enqueue %s (%d items); it can be redone from the database", self.task, len(self.items)
            )


def enqueue_batched_after_commit(task: Any, items: list[Any]) -> None:
    """Like enqueue_after_commit for a task taking one list, but the calls of one transaction share one
    message. Only for idempotent tasks that read their state from the database: items added in a
    savepoint that rolls back are still sent (and find nothing to do)."""
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        enqueue_after_commit(task, list(items))
        return
    batches: dict[str, _Batch] = connection.__dict__.setdefault("_batched_enqueues", {})
    batch = batches.get(task.name)
    # A batch counts only while its flush is still registered: a rollback discards the callbacks.
    if batch is None or not any(entry[1] == batch.flush for entry in connection.run_on_commit):
        batch = batches[task.name] = _Batch(task)
        transaction.on_commit(batch.flush)
    batch.items.extend(items)
