"""Django admin: a read-only view of each tenant's memory for its admins.

Changes go through the domain functions (API, dashboard, commands), so the admin only reads.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory_admin.memory.models import AuditEvent, Dispute, FieldPolicy, MemoryRecord, Project


class TenantReadOnlyAdmin(admin.ModelAdmin):
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        return qs.filter(tenant_id=getattr(request.user, "tenant_id", None))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return bool(user.is_active and (user.is_superuser or (user.is_staff and user.has_role("admin"))))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MemoryRecord)
class MemoryRecordAdmin(TenantReadOnlyAdmin):
    list_display = ["memory_id", "project", "subject_id", "predicate", "status", "revision", "recorded_from"]
    list_filter = ["status"]
    search_fields = ["memory_id", "subject_id", "predicate"]
    list_select_related = ["project"]
    show_full_result_count = False


@admin.register(Dispute)
class DisputeAdmin(TenantReadOnlyAdmin):
    list_display = ["public_id", "project", "subject_id", "predicate", "status", "opened_at"]
    list_filter = ["status"]
    list_select_related = ["project"]


@admin.register(FieldPolicy)
class FieldPolicyAdmin(TenantReadOnlyAdmin):
    list_display = ["predicate", "project", "on_failure", "risk", "recheck_interval"]
    list_select_related = ["project"]


@admin.register(AuditEvent)
class AuditEventAdmin(TenantReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "object_type", "object_id"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_id", "actor_name"]
    show_full_result_count = False


@admin.register(Project)
class ProjectAdmin(TenantReadOnlyAdmin):
    list_display = ["key", "name", "created_at"]
