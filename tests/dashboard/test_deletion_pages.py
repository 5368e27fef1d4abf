"""Compliance pages: request list, dry-run preview before filing, live progress, report, exports."""

from __future__ import annotations

import json

from django.test import Client

from deletion.models import DeletionRequest
from memory_admin.derived.exports import export_project
from memory_admin.memory.actions import assert_fact
from tests.support import DEADLINE, at, deadline
from tests.support.ux_checks import assert_reads_as_people

SUBJECT = DEADLINE["subject_id"]
FORM = {"project_id": "project-a", "scope_kind": "subject_id", "scope_value": SUBJECT, "reason": "Data subject request"}


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def confirmed(client: Client) -> dict:
    """The fields the page's confirmation posts after its preview (the preview id binds the scope)."""
    preview = client.post("/deletions/new/", FORM)
    return {**FORM, "confirm": "yes", "preview_id": preview.context["preview_id"]}


def test_filing_shows_a_dry_run_preview_first_then_files_on_confirmation(compliance, agent):
    assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22)))
    client = signed_in(compliance)
    preview = client.post("/deletions/new/", FORM)
    assert preview.status_code == 200
    assert preview.context["preview"]["records"]["found"] == 1
    assert DeletionRequest.objects.count() == 0
    filed = client.post("/deletions/new/", {**FORM, "confirm": "yes", "preview_id": preview.context["preview_id"]})
    assert filed.status_code == 302
    request = DeletionRequest.objects.get()
    page = client.get(f"/deletions/{request.public_id}/").content.decode()
    assert "Removed from reads" in page and 'hx-trigger="every 2s"' in page
    fragment = client.get(f"/deletions/{request.public_id}/", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="progress"')
    listing = client.get("/deletions/").content.decode()
    assert request.public_id in listing and "removed from reads" in listing


def test_bad_input_gets_a_message_not_a_500(compliance, agent):
    response = signed_in(compliance).post("/deletions/new/", {**FORM, "scope_value": "", "reason": ""})
    assert response.status_code == 400
    response = signed_in(compliance).post("/deletions/new/", {**FORM, "project_id": "nope"})
    assert response.status_code == 404
    assert "No project" in response.content.decode()


def test_the_report_states_each_stage_separately(compliance, agent):
    assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22)))
    client = signed_in(compliance)
    client.post("/deletions/new/", confirmed(client))
    request = DeletionRequest.objects.get()
    report = json.loads(client.get(f"/deletions/{request.public_id}/report/?format=json").content)
    assert set(report["stages"]) == {"accepted_at", "removed_from_reads_at", "purge_confirmed_at", "backups_expire_at"}
    assert "does not claim" in report["statement"]
    printable = client.get(f"/deletions/{request.public_id}/report/").content.decode()
    assert "3. Purge confirmed" in printable


def test_only_compliance_files_owners_see_outsiders_get_404(owner, compliance, outsider, agent):
    assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22)))
    assert signed_in(owner).post("/deletions/new/", FORM).status_code == 403
    filer = signed_in(compliance)
    filer.post("/deletions/new/", confirmed(filer))
    public_id = DeletionRequest.objects.get().public_id
    assert signed_in(owner).get(f"/deletions/{public_id}/").status_code == 200
    assert signed_in(outsider).get(f"/deletions/{public_id}/").status_code == 404
    assert signed_in(owner).post(f"/deletions/{public_id}/retry/").status_code == 403
    assert signed_in(compliance).post(f"/deletions/{public_id}/unknown/").status_code == 404


def test_exports_are_listed_downloaded_and_withheld_during_a_deletion(owner, compliance, agent):
    assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22)))
    export = export_project(owner, "project-a")
    client = signed_in(owner)
    assert client.get("/exports/").status_code == 200
    download = client.get(f"/exports/{export.pk}/download/")
    assert download.status_code == 200 and SUBJECT in download.getvalue().decode()
    filer = signed_in(compliance)
    filer.post("/deletions/new/", confirmed(filer))
    assert client.get(f"/exports/{export.pk}/download/").status_code == 403  # withheld until rewritten


def test_a_reason_quoting_the_value_is_kept_redacted_and_the_page_says_so(compliance, agent):
    """Issue 35, item 5, through the page: the value quoted in the reason is cut out before it is kept."""
    assert_fact(agent, deadline("erin@example.com", "r18", at(10, 22)))
    client = signed_in(compliance)
    form = {**FORM, "reason": "Erin asked us to erase erin@example.com"}
    preview = client.post("/deletions/new/", form)
    filed = client.post(
        "/deletions/new/", {**form, "confirm": "yes", "preview_id": preview.context["preview_id"]}, follow=True
    )
    assert filed.status_code == 200
    request = DeletionRequest.objects.get()
    assert request.reason == "Erin asked us to erase [redacted]" and request.reason_redacted
    page = filed.content.decode()
    assert "replaced by [redacted]" in page and "erin@example.com" not in page
    said = [str(m) for m in filed.context["messages"]]
    assert any("replaced by [redacted]" in m for m in said)
    assert_reads_as_people("".join(f"<p>{m}</p>" for m in said), page="the filing's messages")
