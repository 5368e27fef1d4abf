from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from memory_admin.env import envbool
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
handler500 = "memory_admin.http_errors.server_error"
