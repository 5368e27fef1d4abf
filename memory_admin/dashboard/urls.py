from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from memory_admin.dashboard import (
    conformance_views,
    deletion_views,
    derived_views,
    expiry_views,
    lockout_views,
    recheck_views,
    token_views,
    views,
)

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
    path("expiry-requests/", expiry_views.expiry_requests, name="expiry_requests"),
    path("expiry-requests/<str:request_id>/<str:verb>/", expiry_views.decide, name="expiry_decide"),
    path("audit/", views.audit_log, name="audit"),
    path("records/<str:memory_id>/recheck/", recheck_views.recheck, name="recheck"),
    path("records/<str:memory_id>/verify/", recheck_views.manual_verify, name="verify"),
    path("rechecks/", recheck_views.recheck_queue, name="rechecks"),
    path("agents/", derived_views.agents, name="agents"),
    path("deletions/", deletion_views.request_list, name="deletions"),
    path("deletions/new/", deletion_views.request_new, name="deletion_new"),
    path("deletions/<str:public_id>/", deletion_views.request_detail, name="deletion"),
    path("deletions/<str:public_id>/report/", deletion_views.request_report, name="deletion_report"),
    path("deletions/<str:public_id>/<str:verb>/", deletion_views.request_action, name="deletion_action"),
    path("tombstones/<int:tombstone_id>/lift/", deletion_views.tombstone_lift, name="tombstone_lift"),
    path("exports/", deletion_views.exports, name="exports"),
    path("exports/<int:export_id>/download/", deletion_views.export_download, name="export_download"),
    path("retrieval/", derived_views.retrieval, name="retrieval"),
    path("policies/", recheck_views.policy_list, name="policies"),
    path("policies/new/", recheck_views.policy_edit, name="policy_new"),
    path("policies/<int:policy_id>/", recheck_views.policy_edit, name="policy"),
    path("policies/<int:policy_id>/delete/", recheck_views.policy_delete, name="policy_delete"),
    path("policies/<int:policy_id>/test/", recheck_views.policy_test, name="policy_test"),
    path("tokens/", token_views.token_list, name="tokens"),
    path("tokens/new/", token_views.token_new, name="token_new"),
    path("tokens/<int:token_id>/revoke/", token_views.token_revoke, name="token_revoke"),
    path("conformance/", conformance_views.conformance, name="conformance"),
    path("conformance/run/", conformance_views.conformance_start, name="conformance_start"),
    path("lockouts/", lockout_views.sign_in_lockouts, name="lockouts"),
    path("lockouts/<str:principal_id>/unlock/", lockout_views.unlock, name="unlock"),
]
