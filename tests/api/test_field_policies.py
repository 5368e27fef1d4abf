"""Field policies: admins only, validated, audited, and used by the authorization check."""

from __future__ import annotations

from typing import Any

from memory_admin.memory.models import AuditEvent, FieldPolicy
from tests.support import at, body, deadline

POLICY: dict[str, Any] = {
    "project_id": "project-a",
    "predicate": "submission_deadline",
    "authorized_issuers": ["olivia"],
    "canonical_ref_prefix": "task-system:",
    "canonical_source": {
        "connector": "http_json",
        "url_template": "http://127.0.0.1:9000/tasks/{subject_id}",
        "value_pointer": "/deadline",
        "revision_pointer": "/revision",
        "timeout_seconds": 2,
    },
    "recheck_interval": "P1D",
    "recheck_before_action": True,
    "on_failure": "block_action",
    "risk": "high",
    "retention_days": 90,
}


def test_an_admin_creates_a_policy_and_it_is_audited(api, admin):
    response = api(admin).post("/api/v1/field-policies/", POLICY, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["project_id"] == "project-a"
    assert data["recheck_interval"] == "P1DT00H00M00S"
    event = AuditEvent.objects.get(action="policy.created")
    assert (event.after or {})["authorized_issuers"] == ["olivia"]


def test_the_policy_then_governs_who_may_assert(api, admin, agent, owner):
    api(admin).post("/api/v1/field-policies/", POLICY, format="json")
    refused = api(agent).post("/api/v1/records/", body(deadline("2026-11-02", "r18", at(10, 22))), format="json")
    assert refused.status_code == 403
    accepted = api(owner).post("/api/v1/records/", body(deadline("2026-11-02", "r18", at(10, 22))), format="json")
    assert accepted.status_code == 201


def test_a_project_policy_overrides_the_tenant_wide_one(api, admin, agent):
    api(admin).post("/api/v1/field-policies/", {**POLICY, "project_id": None, "authorized_issuers": []}, format="json")
    api(admin).post("/api/v1/field-policies/", POLICY, format="json")
    refused = api(agent).post("/api/v1/records/", body(deadline("x", "r1", at(10, 22))), format="json")
    assert refused.status_code == 403
    elsewhere = body(deadline("x", "r1", at(10, 22)))
    elsewhere["project_id"] = "project-b"
    assert api(agent).post("/api/v1/records/", elsewhere, format="json").status_code == 201


def test_non_admins_may_not_change_policies_and_only_compliance_may_read_them(api, owner, agent, compliance):
    for principal in (owner, agent, compliance):
        client = api(principal)
        expected_read = 200 if principal is compliance else 403  # compliance reads everything
        assert client.get("/api/v1/field-policies/").status_code == expected_read
        assert client.post("/api/v1/field-policies/", POLICY, format="json").status_code == 403
    assert FieldPolicy.objects.count() == 0


def test_an_unknown_connector_is_refused_with_a_message(api, admin):
    response = api(admin).post(
        "/api/v1/field-policies/", {**POLICY, "canonical_source": {"connector": "telepathy"}}, format="json"
    )
    assert response.status_code == 400
    assert "Unknown connector" in response.json()["errors"]["canonical_source"][0]


def test_a_bad_url_template_and_pointer_are_refused(api, admin):
    source = {**POLICY["canonical_source"], "url_template": "http://x/{customer}", "value_pointer": "deadline"}
    response = api(admin).post("/api/v1/field-policies/", {**POLICY, "canonical_source": source}, format="json")
    assert response.status_code == 400
    problems = " ".join(response.json()["errors"]["canonical_source"])
    assert "url_template" in problems and "value_pointer" in problems


def test_a_bad_duration_and_on_failure_are_refused(api, admin):
    response = api(admin).post(
        "/api/v1/field-policies/", {**POLICY, "recheck_interval": "daily", "on_failure": "panic"}, format="json"
    )
    assert response.status_code == 400
    assert {"recheck_interval", "on_failure"} <= set(response.json()["errors"])


def test_a_duplicate_policy_is_a_409_conflict_not_500(api, admin):
    # The body is well formed (another tenant may send it); what it clashes with is a stored policy.
    assert api(admin).post("/api/v1/field-policies/", POLICY, format="json").status_code == 201
    response = api(admin).post("/api/v1/field-policies/", POLICY, format="json")
    assert response.status_code == 409 and response.json()["code"] == "invalid_state"
    assert FieldPolicy.objects.count() == 1


def test_updating_and_deleting_a_policy_are_audited(api, admin):
    policy_id = api(admin).post("/api/v1/field-policies/", POLICY, format="json").json()["id"]
    response = api(admin).patch(f"/api/v1/field-policies/{policy_id}/", {"risk": "low"}, format="json")
    assert response.status_code == 200
    assert response.json()["risk"] == "low"
    assert api(admin).delete(f"/api/v1/field-policies/{policy_id}/").status_code == 204
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["policy.created", "policy.updated", "policy.deleted"]
    updated = AuditEvent.objects.get(action="policy.updated")
    assert (updated.before or {})["risk"] == "high" and (updated.after or {})["risk"] == "low"
