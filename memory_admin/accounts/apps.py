from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class AccountsConfig(AppConfig):
    name = "memory_admin.accounts"
    label = "accounts"
    verbose_name = "Tenants and principals"

    def ready(self) -> None:
        from memory_admin.lib import pgtime

        # Timestamps loaded by psycopg's compiled loader (see memory_admin/lib/pgtime.py).
        connection_created.connect(pgtime.install, dispatch_uid="memory_admin.lib.pgtime")
