from django.apps import AppConfig


class ConformanceConfig(AppConfig):
    """The conformance suite (a door: it drives every layer the way an agent would)."""

    name = "memory_admin.conformance"
    label = "conformance"
    default_auto_field = "django.db.models.BigAutoField"
