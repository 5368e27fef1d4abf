"""Deletion's Celery tasks by name, for the service that queues them.

`deletion.tasks` is a door that calls the service (`finish_if_verified`); the service queues its tasks by
name through Celery's signatures (with `.name` and `.delay` like the task, eager when
CELERY_TASK_ALWAYS_EAGER is set), so the two modules import one way only: tasks → service.
"""

from __future__ import annotations

from celery import Signature, signature

RUN_REQUEST = "deletion.tasks.run_request"
PURGE_STORE = "deletion.tasks.purge_store"


def run_request() -> Signature:
    return signature(RUN_REQUEST)


def purge_store() -> Signature:
    return signature(PURGE_STORE)
