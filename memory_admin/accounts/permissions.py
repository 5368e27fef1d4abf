from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
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
