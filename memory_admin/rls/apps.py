from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RlsConfig(AppConfig):
    """Row-level security on PostgreSQL: after every `migrate`, each table with a tenant_id column gets its
    forced tenant policy (memory_admin/rls/policies.py), so a table another app adds later is covered too.

    The signal reaches this app only because it has a models module (memory_admin/rls/models.py, empty):
    Django sends `post_migrate` to app configs with models alone. It is sent after every app's migrations
    have run, so the handler sees the whole schema."""

    name = "memory_admin.rls"
    label = "rls"
    verbose_name = "Row-level security"

    def ready(self) -> None:
        from memory_admin.rls import policies

        post_migrate.connect(policies.on_post_migrate, sender=self, dispatch_uid="memory_admin.rls.policies")
