from __future__ import annotations

from django.apps import AppConfig


class DeletionConfig(AppConfig):
    name = "deletion"
    verbose_name = "Deletion requests"
