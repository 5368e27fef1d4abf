from __future__ import annotations

from django.contrib import admin

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
    list_display = ["prefix", "principal", "label", "created_at", "revoked_at"]
    readonly_fields = ["key_hash", "prefix", "created_at"]
