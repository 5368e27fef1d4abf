from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "memory_admin.dashboard"
    label = "dashboard"
    verbose_name = "Owner dashboard"
