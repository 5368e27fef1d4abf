from __future__ import annotations

from memory_admin.celery import app as celery_app

__all__ = ["celery_app"]
