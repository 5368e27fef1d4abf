"""The deletion page's "Download certificate" (compliance, once the purge is confirmed), the printable report's
key id and signature, and the fact page's decision receipts: pages in people's words."""

from __future__ import annotations

import json
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from deletion.models import DeletionRequest
from memory_admin.lib import signing
from memory_admin.memory import receipts
from memory_admin.memory.actions import assert_fact
from tests.support import DEADLINE, at, deadline, run_purge
from tests.support.ux_checks import assert_reads_as_people

SUBJECT = DEADLINE["subject_id"]
FORM = {"project_id": "project-a", "scope_kind": "subject_id", "scope_value": SUBJECT, "reason": "Data subject request"}
FACT_PAGE = f"/facts/?project={DEADLINE['project_id']}&subject={SUBJECT}&predicate={DEADLINE['predicate']}"


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def filed(client: Client) -> DeletionRequest:
    preview = client.post("/deletions/new/", FORM)
    client.post("/deletions/new/", {**FORM, "confirm": "yes", "preview_id": preview.context["preview_id"]})
    return DeletionRequest.objects.get()


def test_compliance_downloads_the_certificate_once_the_purge_is_confirmed(compliance, owner, agent):
    assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22)))
    client = signed_in(compliance)
    request = filed(client)
    page = f"/deletions/{request.public_id}/"
    assert "Download certificate" not in client.get(page).content.decode()
    early = client.get(f"{page}certificate/", follow=True)
    assert "not confirmed yet" in early.content.decode()

    run_purge(request)
    shown = client.get(page).content.decode()
    assert "Download certificate" in shown
    # The link's own words (the page's evidence lists cache keys, a matter of the evidence's own rendering).
    link = shown[shown.index('<p class="no-print" id="certificate">') :]
    assert_reads_as_people(link[: link.index("</p>") + 4], page="the certificate link")
    download = client.get(f"{page}certificate/")
    assert download.status_code == 200 and "attachment" in download["Content-Disposition"]
    certificate = json.loads(download.content)
    assert certificate["kind"] == "deletion_certificate" and signing.verify(certificate)

    report = client.get(f"{page}report/").content.decode()
    assert certificate["key_id"] in report and certificate["signature"] in report
    # Owners follow the request but do not get the certificate.
    assert "Download certificate" not in signed_in(owner).get(page).content.decode()
    assert signed_in(owner).get(f"{page}certificate/").status_code == 403


def test_the_fact_page_lists_the_reads_for_acting_and_each_reader_sees_its_own(owner, agent, other_agent):
    past = timezone.now() - timedelta(days=2)
    assert_fact(agent, deadline("2026-11-02", "r18", past), now=past)
    view, receipt = receipts.read_for_action(agent, DEADLINE["project_id"], SUBJECT, DEADLINE["predicate"])
    assert view.record is not None

    page = signed_in(owner).get(FACT_PAGE).content.decode()
    assert "Decisions to act" in page and f"Served revision {view.record.revision}" in page
    assert receipt.public_id in page  # in its copyable field
    assert_reads_as_people(page, page="the fact page")
    download = signed_in(owner).get(f"/receipts/{receipt.public_id}/")
    assert download.status_code == 200 and json.loads(download.content)["receipt_id"] == receipt.public_id

    others = signed_in(other_agent).get(FACT_PAGE).content.decode()
    assert receipt.public_id not in others and "No agent has read this fact to act on it as you" in others
    assert signed_in(other_agent).get(f"/receipts/{receipt.public_id}/").status_code == 404
