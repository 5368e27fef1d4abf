from __future__ import annotations

from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The operator's commands (create_principal, revoke_token, seed_demo): a door like the API and the
    dashboard, so it sits above every domain layer and may call any of them."""

    name = "memory_admin.ops"
    label = "ops"
