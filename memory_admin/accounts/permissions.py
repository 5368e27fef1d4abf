from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request


class IsTenantMember(BasePermission):
    """Any authenticated principal that belongs to a tenant. Finer rules live in the domain layer."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and getattr(user, "tenant_id", None))


class HasRole(BasePermission):
    roles: tuple[str, ...] = ()

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return IsTenantMember().has_permission(request, view) and user.has_role(*self.roles)  # type: ignore[union-attr]


class IsAdminRole(HasRole):
    roles = ("admin",)


class IsAdminRoleOrComplianceReading(BasePermission):
    """Admins read and change; compliance staff read everything and change nothing (PRODUCT.md, docs/dashboard.md)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not IsTenantMember().has_permission(request, view):
            return False
        user = request.user
        if request.method in SAFE_METHODS:
            return user.has_role("admin", "compliance")  # type: ignore[union-attr, no-any-return]
        return user.has_role("admin")  # type: ignore[union-attr, no-any-return]
