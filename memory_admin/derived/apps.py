from __future__ import annotations

from django.apps import AppConfig


class DerivedConfig(AppConfig):
    name = "memory_admin.derived"
    label = "derived"
    verbose_name = "Derived stores"

    def ready(self) -> None:
        # Memory knows nothing of the derived stores: they hook into its writes. Imported here because the
        # models are ready only now.
        from memory_admin.derived import lineage, propagation, tasks
        from memory_admin.memory import hooks

        # Inside the transaction that ended the belief: summaries stale, plans suspended, notices, caches.
        hooks.on_belief_ended(propagation.propagate)
        # Vector entries of written records are refreshed after commit (one message per transaction).
        hooks.on_records_changed(propagation.refresh_vectors_after_commit)
        hooks.on_valid_time_settled(tasks.mark_records_in_effect)
        # Before the assertion's transaction: the event ids it cites must exist (400).
        hooks.add_assertion_check(lineage.check_assertion_events)
