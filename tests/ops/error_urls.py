"""A URL configuration for tests/ops/test_error_pages_in_both_modes.py: the product's, plus a view that fails."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a failure no person should read: settings and a traceback")


urlpatterns = [path("boom/", boom), path("", include("memory_admin.urls"))]
handler400 = "memory_admin.http_errors.bad_request"
handler403 = "memory_admin.http_errors.permission_denied"
handler404 = "memory_admin.http_errors.page_not_found"
handler500 = "memory_admin.http_errors.server_error"
