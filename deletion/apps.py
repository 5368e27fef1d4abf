from __future__ import annotations

from django.apps import AppConfig


class DeletionConfig(AppConfig):
    name = "deletion"
    verbose_name = "Deletion requests"

    def ready(self) -> None:
        # The layers below know nothing of deletion: it registers its tombstone refusals as their write
        # guards, and the refusal log as the scope around each guarded write. Imported here because the
        # models are ready only now.
        from deletion import tombstones
        from memory_admin.derived import hooks as derived_hooks
        from memory_admin.memory import hooks

        hooks.add_write_scope(tombstones.refusals_logged)
        hooks.add_assertion_guard(tombstones.guard_assertion)
        hooks.add_assertion_batch_guard(tombstones.guard_assertions, replaces=tombstones.guard_assertion)
        hooks.add_derived_from_guard(tombstones.refuse_derived_from)
        hooks.add_hidden_memory_ids(tombstones.tombstoned_memory_ids)
        derived_hooks.add_event_guard(tombstones.refuse_event)
        # The service queues its tasks by name (deletion.task_refs); registering them in every process keeps
        # CELERY_TASK_ALWAYS_EAGER running them in process, as importing them did.
        import deletion.tasks  # noqa: F401
