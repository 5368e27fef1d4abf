from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from memory_admin.dashboard.pages import (
    audit,
    conformance,
    deletions,
    derived,
    disputes,
    expiry,
    lockouts,
    overview,
    policies,
    rechecks,
    records,
    tokens,
)

# One module per page group (dashboard/pages/); the menu and each group's access rule are dashboard/nav.py.

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("records/", records.record_list, name="records"),
    path("records/bulk/", records.bulk_records, name="bulk"),
    path("records/<str:memory_id>/", records.record_detail, name="record"),
    path("records/<str:memory_id>/exclude/", records.exclude, name="exclude"),
    path("records/<str:memory_id>/expire/", records.expire, name="expire"),
    path("facts/", records.fact, name="fact"),
    path("receipts/<str:receipt_id>/", records.receipt, name="receipt"),
    path("disputes/", disputes.dispute_list, name="disputes"),
    path("disputes/<str:dispute_id>/resolve/", disputes.resolve, name="resolve"),
    path("disputes/<str:dispute_id>/reopen/", disputes.reopen, name="reopen_dispute"),
    path("expiry-requests/", expiry.expiry_requests, name="expiry_requests"),
    path("expiry-requests/<str:request_id>/<str:verb>/", expiry.decide, name="expiry_decide"),
    path("audit/", audit.audit_log, name="audit"),
    path("records/<str:memory_id>/recheck/", rechecks.recheck, name="recheck"),
    path("records/<str:memory_id>/verify/", rechecks.manual_verify, name="verify"),
    path("rechecks/", rechecks.recheck_queue, name="rechecks"),
    path("agents/", derived.agents, name="agents"),
    path("deletions/", deletions.request_list, name="deletions"),
    path("deletions/new/", deletions.request_new, name="deletion_new"),
    path("deletions/<str:public_id>/", deletions.request_detail, name="deletion"),
    path("deletions/<str:public_id>/report/", deletions.request_report, name="deletion_report"),
    path("deletions/<str:public_id>/certificate/", deletions.request_certificate, name="deletion_certificate"),
    path("deletions/<str:public_id>/<str:verb>/", deletions.request_action, name="deletion_action"),
    path("tombstones/<int:tombstone_id>/lift/", deletions.tombstone_lift, name="tombstone_lift"),
    path("exports/", deletions.exports, name="exports"),
    path("exports/<int:export_id>/download/", deletions.export_download, name="export_download"),
    path("retrieval/", derived.retrieval, name="retrieval"),
    path("policies/", policies.policy_list, name="policies"),
    path("policies/new/", policies.policy_edit, name="policy_new"),
    path("policies/<int:policy_id>/", policies.policy_edit, name="policy"),
    path("policies/<int:policy_id>/delete/", policies.policy_delete, name="policy_delete"),
    path("policies/<int:policy_id>/test/", policies.policy_test, name="policy_test"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("tokens/new/", tokens.token_new, name="token_new"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke, name="token_revoke"),
    path("conformance/", conformance.conformance, name="conformance"),
    path("conformance/run/", conformance.conformance_start, name="conformance_start"),
    path("lockouts/", lockouts.sign_in_lockouts, name="lockouts"),
    path("lockouts/<str:principal_id>/unlock/", lockouts.unlock, name="unlock"),
]
