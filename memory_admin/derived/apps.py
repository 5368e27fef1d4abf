from __future__ import annotations

from django.apps import AppConfig


class DerivedConfig(AppConfig):
    name = "memory_admin.derived"
    label = "derived"
    verbose_name = "Derived stores"
