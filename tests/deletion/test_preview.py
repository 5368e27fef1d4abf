"""A deletion is filed for the scope that was previewed: the dry run answers a signed preview id, filing may
cite it (the dashboard always does), and a request whose project or scope differs from it files nothing."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from django.core import signing
from django.test import Client

from deletion.models import DeletionRequest, Tombstone
from memory_admin.accounts.services import ensure_principal
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, deadline

URL = "/api/v1/deletion-requests/"
SUBJECT = DEADLINE["subject_id"]


@pytest.fixture
def two_records(agent) -> tuple[str, str]:
    """Two records of one project: the deadline (one revision) and another subject's."""
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    other = assert_fact(
        agent,
        deadline("2026-12-01", "1", at(10, 22)).__class__(
            project_id="project-a",
            subject_id="task-other",
            predicate="submission_deadline",
            value="2026-12-01",
            valid_from=at(10, 22),
            source_canonical_ref="task-system:other",
            source_revision="1",
        ),
    ).record
    return first.memory_id, other.memory_id


def dry_run(client, scope: dict, **extra) -> dict:
    payload = {"project_id": "project-a", "scope": scope, "reason": "Data subject request", "dry_run": True, **extra}
    response = client.post(URL, payload, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def file(client, scope: dict, **extra):
    payload = {"project_id": "project-a", "scope": scope, "reason": "Data subject request", **extra}
    return client.post(URL, payload, format="json")


def nothing_filed() -> bool:
    return not DeletionRequest.objects.exists() and not Tombstone.objects.exists()


# --- the API ------------------------------------------------------------------------------------


def test_a_dry_run_answers_a_preview_id_that_files_exactly_that_scope(api, compliance, two_records):
    first, _ = two_records
    client = api(compliance)
    preview = dry_run(client, {"memory_ids": [first]})
    assert preview["preview_id"] and preview["preview_expires_at"]
    assert nothing_filed()

    response = file(client, {"memory_ids": [first]}, preview_id=preview["preview_id"])

    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["scope"] == {"memory_ids": [first]}
    assert body["preview"]["changed"] is False
    assert body["preview"]["previewed"] == body["preview"]["filed"]
    assert body["preview"]["filed"]["records"] == 1
    assert list(Tombstone.objects.filter(kind="record").values_list("memory_id", flat=True)) == [first]


def test_a_preview_for_one_memory_id_cannot_file_two(api, compliance, two_records):
    first, other = two_records
    client = api(compliance)
    preview = dry_run(client, {"memory_ids": [first]})

    response = file(client, {"memory_ids": [first, other]}, preview_id=preview["preview_id"])

    assert response.status_code == 409
    assert response.json()["code"] == "preview_mismatch"
    assert nothing_filed()
    assert MemoryRecord.objects.filter(memory_id__in=[first, other], tombstoned_at__isnull=True).count() == 2


@pytest.mark.parametrize(
    "change",
    [
        {"scope": {"subject_id": "task-other"}},
        {"scope": {"predicate": "submission_deadline"}},
        {"project_id": "project-b"},
    ],
)
def test_another_scope_or_project_than_the_previewed_one_is_refused(api, compliance, agent, two_records, change):
    assert_fact(
        agent,
        deadline("2026-12-01", "1", at(10, 22)).__class__(
            project_id="project-b",
            subject_id=SUBJECT,
            predicate="submission_deadline",
            value="2026-12-01",
            valid_from=at(10, 22),
            source_canonical_ref="task-system:b",
            source_revision="1",
        ),
    )
    client = api(compliance)
    preview = dry_run(client, {"subject_id": SUBJECT})
    payload = {
        "project_id": "project-a",
        "scope": {"subject_id": SUBJECT},
        "reason": "Data subject request",
        "preview_id": preview["preview_id"],
        **change,
    }

    response = client.post(URL, payload, format="json")

    assert response.status_code == 409, response.json()
    assert response.json()["code"] == "preview_mismatch"
    assert nothing_filed()


def test_the_order_and_repeats_of_memory_ids_do_not_matter(api, compliance, two_records):
    first, other = two_records
    client = api(compliance)
    preview = dry_run(client, {"memory_ids": [first, other]})
    response = file(client, {"memory_ids": [other, first, other]}, preview_id=preview["preview_id"])
    assert response.status_code == 202, response.json()
    assert response.json()["preview"]["changed"] is False


def test_a_forged_preview_id_is_refused(api, compliance, two_records):
    first, _ = two_records
    client = api(compliance)
    token = dry_run(client, {"memory_ids": [first]})["preview_id"]
    forged_claims = signing.loads(token, salt="deletion.preview")
    forged_claims["s"] = "0" * 32
    attempts = [
        token[:-2] + ("AA" if not token.endswith("AA") else "BB"),  # a tampered signature
        signing.dumps(forged_claims, key="not-the-server-key", salt="deletion.preview"),  # signed with another key
        signing.dumps(forged_claims, salt="another.salt"),  # this server's key, another purpose
        "not-a-preview",
    ]
    for preview_id in attempts:
        response = file(client, {"memory_ids": [first]}, preview_id=preview_id)
        assert response.status_code == 400, (preview_id, response.json())
        assert response.json()["code"] == "preview_invalid"
    assert nothing_filed()


def test_an_expired_preview_id_is_refused(api, compliance, two_records, monkeypatch):
    first, _ = two_records
    client = api(compliance)
    # The preview was made an hour ago (signing stamps it with its own clock; only that clock is moved).
    monkeypatch.setattr(signing, "time", SimpleNamespace(time=lambda: time.time() - 3600))
    token = dry_run(client, {"memory_ids": [first]})["preview_id"]
    monkeypatch.undo()

    response = file(client, {"memory_ids": [first]}, preview_id=token)

    assert response.status_code == 400
    assert response.json()["code"] == "preview_expired"
    assert nothing_filed()


def test_a_preview_is_its_maker_s_own(api, compliance, outsider, two_records):
    first, _ = two_records
    token = dry_run(api(compliance), {"memory_ids": [first]})["preview_id"]
    colleague = ensure_principal("acme", "cora", ["compliance"])

    response = file(api(colleague), {"memory_ids": [first]}, preview_id=token)
    assert response.status_code == 400 and response.json()["code"] == "preview_invalid"
    # Another tenant: its project-a is not ours, and the token is refused before anything is looked up.
    response = file(api(outsider), {"memory_ids": [first]}, preview_id=token)
    assert response.status_code == 400 and response.json()["code"] == "preview_invalid"
    assert nothing_filed()


def test_records_that_arrive_after_the_preview_are_filed_and_reported(api, compliance, agent, two_records):
    client = api(compliance)
    preview = dry_run(client, {"subject_id": SUBJECT})
    assert next(s for s in preview["stores"] if s["store"] == "records")["found"] == 1
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))

    response = file(client, {"subject_id": SUBJECT}, preview_id=preview["preview_id"])

    assert response.status_code == 202, response.json()
    drift = response.json()["preview"]
    assert drift["changed"] is True and drift["records_changed"] is True
    assert drift["previewed"]["records"] == 1 and drift["filed"]["records"] == 2
    assert MemoryRecord.all_objects.filter(subject_id=SUBJECT).removed().count() == 2  # both, hidden by the rule


def test_filing_without_a_preview_id_still_works_for_existing_clients(api, compliance, two_records):
    first, _ = two_records
    response = file(api(compliance), {"memory_ids": [first]})
    assert response.status_code == 202
    assert "preview" not in response.json()
    assert DeletionRequest.objects.count() == 1


def test_only_compliance_files_even_with_a_preview_id(api, compliance, owner, two_records):
    first, _ = two_records
    token = dry_run(api(compliance), {"memory_ids": [first]})["preview_id"]
    response = file(api(owner), {"memory_ids": [first]}, preview_id=token)
    assert response.status_code == 403
    assert nothing_filed()


# --- the dashboard page ---------------------------------------------------------------------------

FORM = {"project_id": "project-a", "scope_kind": "memory_ids", "reason": "Data subject request"}


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def previewed(client: Client, scope_value: str) -> dict[str, str]:
    """Preview on the page; answer the fields its confirmation form would post."""
    response = client.post("/deletions/new/", {**FORM, "scope_value": scope_value})
    assert response.status_code == 200
    assert response.context["preview_id"]
    return {
        **FORM,
        "scope_value": scope_value,
        "due_by": "",
        "preview_id": response.context["preview_id"],
        "confirm": "yes",
    }


def test_the_page_shows_the_previewed_scope_read_only(compliance, two_records):
    first, _ = two_records
    response = signed_in(compliance).post("/deletions/new/", {**FORM, "scope_value": first})
    page = response.content.decode()
    assert f'<input type="hidden" name="scope_value" value="{first}"' in page
    assert '<input type="hidden" name="preview_id"' in page
    assert 'type="text" name="scope_value"' not in page and "<select" not in page
    assert 'data-testid="confirm-deletion"' in page and 'data-testid="edit-scope"' in page


def test_the_page_refuses_to_file_a_scope_other_than_the_previewed_one(compliance, two_records):
    first, other = two_records
    client = signed_in(compliance)
    fields = previewed(client, first)

    response = client.post("/deletions/new/", {**fields, "scope_value": f"{first},{other}"})

    assert response.status_code == 409
    assert "differs from the preview" in response.content.decode()
    assert response.context["preview"] is None  # back to the editable form: preview again
    assert nothing_filed()


def test_the_page_never_files_without_a_preview(compliance, two_records):
    first, _ = two_records
    client = signed_in(compliance)
    response = client.post("/deletions/new/", {**FORM, "scope_value": first, "confirm": "yes"})
    assert response.status_code == 400
    assert "Preview the request first" in response.content.decode()
    fields = previewed(client, first)
    response = client.post("/deletions/new/", {**fields, "preview_id": "forged"})
    assert response.status_code == 400
    assert nothing_filed()


def test_the_page_files_the_previewed_scope_on_confirmation(compliance, two_records):
    first, _ = two_records
    client = signed_in(compliance)
    response = client.post("/deletions/new/", previewed(client, first), follow=True)
    request = DeletionRequest.objects.get()
    assert request.scope_value == [first]
    assert response.redirect_chain[-1][0] == f"/deletions/{request.public_id}/"
    assert f"Deletion filed for 1 record in {request.project.key}; its progress is below." in response.content.decode()
    assert "changed between the preview and filing" not in response.content.decode()


def test_the_page_says_when_the_stores_changed_since_the_preview(compliance, agent, two_records):
    client = signed_in(compliance)
    response = client.post("/deletions/new/", {**FORM, "scope_kind": "subject_id", "scope_value": SUBJECT})
    fields = {
        **FORM,
        "scope_kind": "subject_id",
        "scope_value": SUBJECT,
        "due_by": "",
        "confirm": "yes",
        "preview_id": response.context["preview_id"],
    }
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))

    page = client.post("/deletions/new/", fields, follow=True).content.decode()

    assert "changed between the preview and filing: records 2 (previewed 1)" in page
    assert MemoryRecord.all_objects.filter(subject_id=SUBJECT).removed().count() == 2  # both, hidden by the rule


def test_edit_scope_goes_back_to_the_form_with_the_values(compliance, two_records):
    first, _ = two_records
    client = signed_in(compliance)
    fields = previewed(client, first)
    fields.pop("confirm")  # the browser sends only the button pressed
    response = client.post("/deletions/new/", {**fields, "edit": "yes"})
    page = response.content.decode()
    assert response.status_code == 200 and response.context["preview"] is None
    assert f'name="scope_value" value="{first}"' in page and 'data-testid="preview-deletion"' in page
    assert nothing_filed()
