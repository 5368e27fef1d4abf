from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from memory_admin.accounts.models import ApiToken, Principal, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "time_zone", "created_at"]


@admin.register(Principal)
class PrincipalAdmin(admin.ModelAdmin):
    list_display = ["username", "tenant", "kind", "roles", "is_active"]
    list_filter = ["kind", "tenant"]
    exclude = ["password"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Read-only here: tokens are issued and revoked through memory.tokens (the API, the Tokens page, the
    commands), which audits every change; an edit in this admin would not be audited. (Deleting stays
    possible, as deleting a principal deletes its tokens.)"""

    list_display = ["prefix", "name", "principal", "created_at", "expires_at", "last_used_at", "revoked_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False
