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
