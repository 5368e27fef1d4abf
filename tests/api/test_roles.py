"""Smaller gaps against PRODUCT.md (issue 10, item 8): compliance reads everything and changes nothing,
unknown or foreign ids are 404 on dashboard actions, the deletion list's cursor shape, a safe `next`,
and password validation."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.password_validation import get_default_password_validators
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client

from deletion import service
from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal, Tenant
from memory_admin.accounts.services import ensure_principal
from memory_admin.derived.exports import export_project
from memory_admin.derived.models import ExportFile
from memory_admin.memory.errors import Forbidden
from memory_admin.memory.models import FieldPolicy, MemoryRecord

POLICY = {
    "project_id": None,
    "predicate": "send_permission",
    "authorized_issuers": ["ada"],
    "canonical_source": {"connector": "manual"},
    "on_failure": "block_action",
    "risk": "high",
}


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


@pytest.fixture
def policy(admin) -> FieldPolicy:
    return FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline")


# --- Compliance reads everything and changes nothing ------------------------------------------------------


def test_compliance_reads_field_policies_but_cannot_change_or_test_them(api, compliance, policy):
    client = api(compliance)
    listed = client.get("/api/v1/field-policies/")
    assert listed.status_code == 200 and [p["predicate"] for p in listed.json()["results"]] == ["submission_deadline"]
    assert client.get(f"/api/v1/field-policies/{policy.pk}/").status_code == 200
    assert client.post("/api/v1/field-policies/", POLICY, format="json").status_code == 403
    assert client.patch(f"/api/v1/field-policies/{policy.pk}/", {"risk": "high"}, format="json").status_code == 403
    assert client.delete(f"/api/v1/field-policies/{policy.pk}/").status_code == 403
    tested = client.post(f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": "x"}, format="json")
    assert tested.status_code == 403
    assert FieldPolicy.objects.get(pk=policy.pk).risk == "low" and FieldPolicy.objects.count() == 1
    # The dashboard's list too, read-only.
    page = signed_in(compliance).get("/policies/")
    assert page.status_code == 200 and "submission_deadline" in page.content.decode()
    assert "New policy" not in page.content.decode()
    assert signed_in(compliance).post(f"/policies/{policy.pk}/delete/", {"confirm": "yes"}).status_code == 403


def test_owners_and_agents_still_do_not_read_policies(api, owner, agent, policy):
    for principal in (owner, agent):
        assert api(principal).get("/api/v1/field-policies/").status_code == 403


def test_compliance_cannot_create_an_export_but_may_download_one(owner, compliance, moved_deadline):
    with pytest.raises(Forbidden):
        export_project(compliance, "project-a")
    client = signed_in(compliance)
    response = client.post("/exports/", {"project_id": "project-a"})
    assert response.status_code == 403
    assert ExportFile.objects.count() == 0
    assert "Export project as JSONL" not in client.get("/exports/").content.decode()
    with pytest.raises(CommandError):
        call_command("export", "--tenant", "acme", "--project", "project-a", "--as", "carl", stdout=StringIO())
    assert ExportFile.objects.count() == 0
    made = export_project(owner, "project-a")
    assert client.get(f"/exports/{made.pk}/download/").status_code == 200


# --- Dashboard actions on unknown or foreign ids -------------------------------------------------------


def test_dashboard_actions_on_an_unknown_or_foreign_id_are_404(compliance, outsider, owner, admin, moved_deadline):
    request = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": "nobody"}, reason="Data subject request"
    )
    assert isinstance(request, DeletionRequest)
    for verb in ("approve", "cancel", "retry"):
        assert signed_in(compliance).post(f"/deletions/del-unknown/{verb}/").status_code == 404, verb
        assert signed_in(outsider).post(f"/deletions/{request.public_id}/{verb}/").status_code == 404, verb
    memory_id = moved_deadline[1].record.memory_id
    for principal in (owner, admin):
        client = signed_in(principal)
        for url in (
            "/records/mem-unknown/exclude/",
            "/records/mem-unknown/expire/",
            "/records/mem-unknown/recheck/",
            "/records/mem-unknown/verify/",
            "/disputes/dsp-unknown/resolve/",
        ):
            assert client.post(url, {"reason": "x", "confirm": "yes"}).status_code == 404, url
    for url in ("/policies/999999/", "/policies/999999/delete/", "/policies/999999/test/"):
        assert signed_in(admin).post(url, {"confirm": "yes", "subject_id": "x"}).status_code == 404, url
    outsider_client = signed_in(outsider)
    for verb in ("exclude", "expire", "recheck", "verify"):
        assert (
            outsider_client.post(f"/records/{memory_id}/{verb}/", {"reason": "x", "confirm": "yes"}).status_code == 404
        )
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"
    assert DeletionRequest.objects.get(pk=request.pk).state == request.state


# --- The agent's deletion-request list ----------------------------------------------------------------------


def test_the_deletion_request_list_has_the_cursor_page_shape_for_every_caller(api, agent, compliance):
    for principal in (agent, compliance):
        payload = api(principal).get("/api/v1/deletion-requests/").json()
        assert set(payload) == {"next", "previous", "results"}, principal.name
        assert payload["results"] == []


# --- A safe `next` ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "evil", ["javascript:alert(document.cookie)", "//evil.example/", "https://evil.example/", "/\\evil.example/"]
)
def test_a_hostile_next_never_reaches_a_link_or_a_redirect(owner, moved_deadline, evil):
    memory_id = moved_deadline[1].record.memory_id
    client = signed_in(owner)
    bulk = client.post("/records/bulk/", {"ids": [memory_id], "operation": "exclude", "reason": "x", "next": evil})
    assert bulk.status_code == 200
    page = bulk.content.decode()
    assert "evil.example" not in page and "javascript:" not in page
    assert 'href="/records/"' in page  # Cancel goes back to the records list
    single = client.post(f"/records/{memory_id}/exclude/", {"reason": "x", "next": evil})
    assert single.status_code == 200
    assert "evil.example" not in single.content.decode() and "javascript:" not in single.content.decode()
    done = client.post(f"/records/{memory_id}/exclude/", {"reason": "x", "next": evil, "confirm": "yes"})
    assert done.status_code == 302 and done["Location"].startswith("/facts/?")


# --- Password validation --------------------------------------------------------------------------------------


def test_password_validators_are_configured():
    names = {validator.__class__.__name__ for validator in get_default_password_validators()}
    assert {"MinimumLengthValidator", "CommonPasswordValidator", "UserAttributeSimilarityValidator"} <= names


@pytest.mark.parametrize("weak", ["demo", "password123", "12345678901", "peter@initech"])
def test_create_principal_refuses_a_weak_password_and_creates_nothing(db, weak):
    with pytest.raises(CommandError, match="password is refused"):
        call_command(
            "create_principal",
            "--tenant",
            "initech",
            "--name",
            "peter",
            "--role",
            "owner",
            "--password",
            weak,
            stdout=StringIO(),
        )
    assert not Principal.objects.filter(username="peter@initech").exists()
    assert not Tenant.objects.filter(slug="initech").exists()


def test_ensure_principal_validates_a_new_password_for_an_existing_person_too(owner):
    with pytest.raises(ValidationError):
        ensure_principal("acme", "olivia", ["owner"], password="demo")
    owner.refresh_from_db()
    assert owner.check_password("pw-olivia")  # unchanged
    ensure_principal("acme", "olivia", ["owner"], password="correct-horse-battery-7")
    owner.refresh_from_db()
    assert owner.check_password("correct-horse-battery-7")


def test_only_an_explicit_bypass_accepts_the_demo_password(db):
    from memory_admin.demo import PASSWORD

    person = ensure_principal("demo", "owner", ["owner"], password=PASSWORD, validate=False)
    assert person.check_password(PASSWORD)
    with pytest.raises(ValidationError):
        ensure_principal("demo", "owner", ["owner"], password=PASSWORD)
