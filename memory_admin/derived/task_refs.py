"""The derived stores' Celery tasks by name, for the domain modules that queue them.

The tasks module is a door: it imports the domain (lineage, vectors) at the top. The domain modules
(propagation, lineage) queue its tasks by name, through Celery's signatures (a signature has `.name` and
`.delay` like the task it names, and runs it eagerly when CELERY_TASK_ALWAYS_EAGER is set), so no domain
module imports the tasks module and no import runs in a circle.
"""

from __future__ import annotations

from celery import Signature, signature

REFRESH_RECORD_VECTORS = "memory_admin.derived.tasks.refresh_record_vectors"
EMBED_SUMMARIES = "memory_admin.derived.tasks.embed_summaries"
REGENERATE_SUMMARIES = "memory_admin.derived.tasks.regenerate_summaries"


def refresh_record_vectors() -> Signature:
    return signature(REFRESH_RECORD_VECTORS)


def embed_summaries() -> Signature:
    return signature(EMBED_SUMMARIES)


def regenerate_summaries() -> Signature:
    return signature(REGENERATE_SUMMARIES)
