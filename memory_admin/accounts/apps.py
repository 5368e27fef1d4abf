from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "memory_admin.accounts"
    label = "accounts"
    verbose_name = "Tenants and principals"
