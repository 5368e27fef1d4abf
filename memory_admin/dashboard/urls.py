from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from memory_admin.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("records/", views.record_list, name="records"),
    path("records/bulk/", views.bulk_records, name="bulk"),
    path("records/<str:memory_id>/", views.record_detail, name="record"),
    path("records/<str:memory_id>/exclude/", views.exclude, name="exclude"),
    path("records/<str:memory_id>/expire/", views.expire, name="expire"),
    path("facts/", views.fact, name="fact"),
    path("disputes/", views.dispute_list, name="disputes"),
    path("disputes/<str:dispute_id>/resolve/", views.resolve, name="resolve"),
    path("audit/", views.audit_log, name="audit"),
]
