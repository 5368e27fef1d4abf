from __future__ import annotations

import sys

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from memory_admin import http_errors
from memory_admin.env import envbool
from memory_admin.lib import outages
from memory_admin.mcp.http import mcp_endpoint

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (`?script=`), not inline: the CSP allows none.
    path("api/v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("memory_admin.api.urls")),
    # The MCP server over Streamable HTTP (bearer agent token required); also served at /mcp without the slash,
    # the form MCP clients are usually given, since APPEND_SLASH cannot redirect a POST.
    path("mcp/", mcp_endpoint, name="mcp"),
    path("mcp", mcp_endpoint),
    path("", include("memory_admin.dashboard.urls")),
]

# The bench's ceiling view (bench/load.py): only when the environment asks for it, never otherwise.
if envbool("BENCH_CEILING_VIEW", False):
    from memory_admin.api.ceiling import CeilingView

    urlpatterns.insert(0, path("api/v1/bench/ceiling/", CeilingView.as_view(), name="bench-ceiling"))

# Django's own error answers: JSON in the error shape under /api/, plain pages for the dashboard.
handler400 = "memory_admin.http_errors.bad_request"
handler403 = "memory_admin.http_errors.permission_denied"
handler404 = "memory_admin.http_errors.page_not_found"
handler500 = "memory_admin.urls.server_error"


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 handler. Django calls it while handling the exception, so the exception is at hand: a cache
    server or database that cannot be reached (lib.outages) is answered 503 with Retry-After, which clients
    retry, never 500; anything else is the product's 500 (http_errors.server_error)."""
    if outages.unavailable(sys.exc_info()[1]) is not None:
        return http_errors.service_unavailable(request, outages.RETRY_AFTER_SECONDS)
    return http_errors.server_error(request)
