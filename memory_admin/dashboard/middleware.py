from __future__ import annotations

import zoneinfo
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from memory_admin.accounts import tenancy


class TenantContextMiddleware:
    """Each request acts for the signed-in principal's tenant (row-level security on PostgreSQL; none for an
    anonymous request, which the API's token authentication may then set), and whatever the request set is
    undone when it ends, so no tenant outlives its request on a reused connection."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        tenant_id = getattr(request.user, "tenant_id", None) if request.user.is_authenticated else None
        with tenancy.tenant_context(tenant_id):
            return self.get_response(request)


class TenantTimezoneMiddleware:
    """Show dates in the signed-in principal's tenant time zone."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        tenant = getattr(request.user, "tenant", None) if request.user.is_authenticated else None
        if tenant is not None:
            try:
                timezone.activate(zoneinfo.ZoneInfo(tenant.time_zone))
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                timezone.deactivate()
        else:
            timezone.deactivate()
        return self.get_response(request)
