from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (`?script=`), not inline: the CSP allows none.
    path("api/v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("memory_admin.api.urls")),
    path("", include("memory_admin.dashboard.urls")),
]

# Django's own error answers: JSON in the error shape under /api/, plain pages for the dashboard.
handler400 = "memory_admin.http_errors.bad_request"
handler403 = "memory_admin.http_errors.permission_denied"
handler404 = "memory_admin.http_errors.page_not_found"
handler500 = "memory_admin.http_errors.server_error"
