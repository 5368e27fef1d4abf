from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RlsConfig(AppConfig):
    """Row-level security on PostgreSQL: after every `migrate`, each table with a tenant_id column gets its
    forced tenant policy (memory_admin/rls/policies.py), so a table another app adds later is covered too."""

    name = "memory_admin.rls"
    label = "rls"
    verbose_name = "Row-level security"

    def ready(self) -> None:
        from memory_admin.rls import policies

        post_migrate.connect(policies.on_post_migrate, sender=self, dispatch_uid="memory_admin.rls.policies")
