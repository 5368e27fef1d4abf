"""Enqueueing Celery work after commit, so a task never sees a row that was rolled back."""

from __future__ import annotations

import logging
import weakref
from typing import Any

from django.db import transaction

from memory_admin.accounts.tenancy import current_tenant_id, tenant_context

log = logging.getLogger(__name__)


def enqueue_after_commit(task: Any, *args: Any) -> None:
    """`task.delay(*args)` once the transaction commits.

    The change is already committed when this runs, so a broker that cannot be reached must not turn the
    request into an error: the failure is logged. Every task reads its state from the database, so the
    work can be redone: the recheck sweep finds due records again, and `manage.py reindex_vectors`
    rebuilds vector entries from the records.
    """

    tenant_id = current_tenant_id()  # the task acts for the tenant of the work that queued it

    def send() -> None:
        try:
            with tenant_context(tenant_id):
                task.delay(*args)
        except Exception:
            log.exception("Could not enqueue %s%r; a periodic sweep will redo it", getattr(task, "name", task), args)

    transaction.on_commit(send)


class _Batch:
    """The items of one task gathered in one transaction; sent once, by the flush registered with on_commit."""

    def __init__(self, task: Any, tenant_id: int | None) -> None:
        self.task = task
        self.tenant_id = tenant_id
        self.items: list[Any] = []
        self.sent = False

    def flush(self) -> None:
        self.sent = True
        try:
            with tenant_context(self.tenant_id):
                self.task.delay(sorted(set(self.items)))
        except Exception:
            log.exception(
                "Could not enqueue %s (%d items); it can be redone from the database", self.task, len(self.items)
            )


# The open batch of each (connection, task, tenant: a message acts for one tenant). Held weakly: the only
# strong reference is the flush that transaction.on_commit keeps, so when a rollback discards the transaction's callbacks the batch goes with
# them, and the next transaction starts a new one. No look into Django's private callback list.
_open_batches: weakref.WeakValueDictionary[tuple[int, str, int | None], _Batch] = weakref.WeakValueDictionary()


def enqueue_batched_after_commit(task: Any, items: list[Any]) -> None:
    """Like enqueue_after_commit for a task taking one list, but the calls of one transaction share one
    message. Only for idempotent tasks that read their state from the database: items added in a
    savepoint that rolls back are still sent (and find nothing to do)."""
    if transaction.get_autocommit():  # no transaction open: nothing to batch with
        enqueue_after_commit(task, list(items))
        return
    key = (id(transaction.get_connection()), task.name, current_tenant_id())
    batch = _open_batches.get(key)
    if batch is None or batch.sent:
        batch = _open_batches[key] = _Batch(task, key[2])
        transaction.on_commit(batch.flush)
    batch.items.extend(items)
