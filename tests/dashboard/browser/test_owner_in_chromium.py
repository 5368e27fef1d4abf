"""The owner dashboard in a real browser: Playwright driving Debian's Chromium against the live server.

Needs /usr/bin/chromium (`bin/ensure-chromium` installs it; `make test` runs that first). Without it
these tests fail, they are not skipped. A failing test leaves a screenshot in var/test-artifacts/.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from deletion.models import DeletionRequest
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord
from tests.support.browser import DEADLINE_FACT, sign_in

SATO_ROOM_FACT = "/facts/?project=project-a&subject=person-sato&predicate=meeting_room"
OCT_30 = "Fri 30 Oct 2026, 17:00 JST"  # the demo deadlines as the pages show them (tenant zone)
NOV_2 = "Mon 2 Nov 2026, 17:00 JST"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def record(memory_id: str) -> MemoryRecord:
    return MemoryRecord.objects.get(memory_id=memory_id)


def test_owner_signs_in_and_lands_on_the_overview(page: Page, live_server: Any) -> None:
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))

    sign_in(page, "owner@demo")

    expect(page).to_have_url(f"{live_server.url}/")
    expect(page.locator(".who")).to_contain_text("owner@demo")
    tiles = page.locator("section.tiles a.tile")
    expect(tiles).to_have_count(len(MemoryRecord.Status.values) + 2)
    for status in MemoryRecord.Status.values:
        expect(tiles.filter(has=page.locator(f".badge.status-{status}"))).to_have_count(1)
    accepted = MemoryRecord.objects.filter(status=MemoryRecord.Status.ACCEPTED).count()
    assert accepted > 0
    expect(tiles.filter(has=page.locator(".badge.status-accepted")).locator(".tile-n")).to_have_text(str(accepted))
    expect(tiles.filter(has_text="open dispute:").locator(".tile-n")).to_have_text("1")


def test_filtering_records_updates_the_table_in_place(page: Page) -> None:
    sign_in(page, "owner@demo")
    page.goto("/records/")
    rows = page.locator("#table table.records tbody tr")
    expect(rows.first).to_be_visible()
    page.evaluate("window.__sameDocument = true")

    page.get_by_label("Subject", exact=True).fill("task-proposal-017")
    page.get_by_label("Subject", exact=True).press("Enter")

    expect(page).to_have_url(re.compile(r"/records/\?.*subject=task-proposal-017"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_id("mem-deadline-002")
    expect(rows.first).to_contain_text(NOV_2)

    page.locator("select[name=status]").select_option(label="All statuses")

    expect(page).to_have_url(re.compile(r"/records/\?(?=.*subject=task-proposal-017)(?=.*status=all)"))
    expect(page.locator(".view-note")).to_contain_text("Showing every status")
    expect(rows).to_have_count(3)
    ids = {rows.nth(i).get_attribute("id") for i in range(3)}
    assert ids == {"mem-deadline-001", "mem-deadline-002", "mem-deadline-late-import"}
    assert page.evaluate("window.__sameDocument") is True, "the filter reloaded the whole page"


def test_the_deadline_fact_answers_as_of_valid_and_record_time(page: Page) -> None:
    sign_in(page, "owner@demo")
    page.goto("/records/?subject=task-proposal-017")
    page.get_by_role("link", name="task-proposal-017 · submission_deadline").click()
    expect(page).to_have_url(re.compile(re.escape(DEADLINE_FACT)))
    expect(page.locator("#current .big-value")).to_have_text(NOV_2)

    valid_at, known_at = page.get_by_test_id("valid-at"), page.get_by_test_id("known-at")
    answer = page.locator("#asof .asof-value")

    def ask(expected_query: str) -> None:
        """Press Ask and wait for its htmx answer, so no step reads the previous step's answer."""
        with page.expect_response(
            lambda r: "/facts/?" in r.url and r.request.headers.get("hx-request") == "true"
        ) as got:
            page.get_by_role("button", name="Ask").click()
        assert expected_query in got.value.url
        assert got.value.ok

    # What was the deadline on Oct 21, as we know it now: Oct 30 (it moved only from Oct 22).
    valid_at.fill("2026-10-21T12:00")
    ask("valid_at=2026-10-21T12%3A00&known_at=")
    expect(answer).to_have_text(OCT_30)
    expect(page.locator("#asof")).to_contain_text("version 1 of 3")  # the version, never its record id
    expect(page.locator("#asof")).not_to_contain_text("mem-deadline-001")

    # What did we believe on Oct 21: Oct 30; on Oct 23: Nov 2.
    valid_at.fill("")
    known_at.fill("2026-10-21T12:00")
    ask("valid_at=&known_at=2026-10-21T12%3A00")
    expect(answer).to_have_text(OCT_30)

    known_at.fill("2026-10-23T12:00")
    ask("valid_at=&known_at=2026-10-23T12%3A00")
    expect(answer).to_have_text(NOV_2)
    expect(page.locator("#asof")).to_contain_text("version 2 of 3")


def test_owner_resolves_the_price_dispute(page: Page) -> None:
    dispute = Dispute.objects.get(subject_id="product-x", predicate="unit_price", status="open")
    sign_in(page, "owner@demo")
    page.goto("/disputes/")
    card = page.locator(f"section.dispute#{dispute.public_id}")
    expect(card).to_contain_text("1,200")  # numbers with grouping (issue 15)
    expect(card).to_contain_text("1,350")

    # Without a reason nothing changes and the page says why.
    card.get_by_test_id("winner-mem-price-partner").check()
    card.get_by_test_id("resolve-submit").click()
    expect(page.locator(".messages .msg-error")).to_contain_text("Give a reason")
    expect(card).to_be_visible()
    expect(card.get_by_test_id("resolve-submit")).to_be_visible()
    dispute.refresh_from_db()
    assert dispute.status == "open"

    card.get_by_test_id("winner-mem-price-partner").check()
    card.get_by_test_id("resolve-reason").fill("The partner catalogue is the contract price.")
    card.get_by_test_id("resolve-submit").click()
    # Said by what it is and what agents now get, never by the dispute's id (issue 34, items 1 and 9).
    resolved = page.locator(".messages .msg-success")
    expect(resolved).to_contain_text(f"Resolved {dispute.subject_id} · {dispute.predicate}: agents now get")
    expect(resolved).not_to_contain_text(dispute.public_id)

    dispute.refresh_from_db()
    assert dispute.status == "resolved"
    assert record("mem-price-partner").status == MemoryRecord.Status.ACCEPTED
    assert record("mem-price-vendor").status == MemoryRecord.Status.SUPERSEDED


def test_owner_excludes_a_record(page: Page) -> None:
    sign_in(page, "owner@demo")
    page.goto(SATO_ROOM_FACT)
    expect(page.locator("#current .big-value")).to_have_text("Room 4B")

    page.get_by_test_id("exclude-reason").fill("Room 4B was a typo in the chat.")
    page.get_by_test_id("exclude-submit").click()
    # A confirmation page, as for bulk operations: nothing changes until it is confirmed.
    expect(page.get_by_test_id("confirm-reason")).to_have_value("Room 4B was a typo in the chat.")
    assert record("mem-sato-room").status == MemoryRecord.Status.ACCEPTED
    page.get_by_test_id("confirm-submit").click()

    done = page.locator(".messages .msg-success")
    expect(done).to_contain_text("person-sato · meeting_room (version 1) is excluded from agents' context")
    expect(done).not_to_contain_text("mem-sato-room")
    expect(page).to_have_url(re.compile(r"/facts/\?project=project-a&subject=person-sato&predicate=meeting_room"))
    expect(page.locator("li#mem-sato-room .badge.status-excluded")).to_be_visible()
    expect(page.locator("#current")).to_contain_text("the latest record is excluded")
    expect(page.get_by_test_id("exclude-submit")).to_have_count(0)
    sato = record("mem-sato-room")
    assert sato.status == MemoryRecord.Status.EXCLUDED
    assert sato.status_reason == "Room 4B was a typo in the chat."


def test_compliance_sees_the_fact_read_only(page: Page) -> None:
    sign_in(page, "compliance@demo")
    page.goto(SATO_ROOM_FACT)
    expect(page.locator("#current .big-value")).to_have_text("Room 4B")

    expect(page.locator("#operations")).to_contain_text("Read-only")
    expect(page.get_by_test_id("exclude-submit")).to_have_count(0)
    expect(page.get_by_test_id("exclude-reason")).to_have_count(0)
    expect(page.locator("#operations").get_by_role("button", name="Exclude from context")).to_be_disabled()
    for button in page.locator("#operations button").all():
        expect(button).to_be_disabled()
    assert record("mem-sato-room").status == MemoryRecord.Status.ACCEPTED


def test_owner_expires_two_records_in_bulk_with_javascript_on(page: Page) -> None:
    """The selection bar sits inside the htmx-refreshed table: ticking rows must not reload the table (which
    cleared the ticks); the bar names the verb and the count, the confirmation takes the audited reason."""
    sign_in(page, "owner@demo")
    page.goto("/records/?project=project-c")
    rows = page.locator("#table table.records tbody tr")
    expect(rows.nth(1)).to_be_visible()
    first, second = rows.nth(0).get_attribute("id"), rows.nth(1).get_attribute("id")
    assert first and second
    bar = page.get_by_test_id("bulk-bar")
    expect(bar).to_be_hidden()  # nothing selected yet
    table_requests: list[str] = []
    page.on("request", lambda r: table_requests.append(r.url) if r.headers.get("hx-request") == "true" else None)
    for memory_id in (first, second):
        assert record(memory_id).status == MemoryRecord.Status.ACCEPTED
        page.get_by_label(f"Select {memory_id}", exact=True).check()

    expect(bar).to_be_visible()
    page.get_by_role("button", name="Expire 2 records").click()
    assert table_requests == [], f"the selection reloaded the table: {table_requests}"

    expect(page.get_by_role("heading", name="Expire 2 records")).to_be_visible()
    page.get_by_test_id("bulk-reason").fill("Project C closed.")
    page.get_by_test_id("bulk-confirm").click()
    expect(page.locator(".messages .msg-success")).to_contain_text("Expired 2 records")

    for memory_id in (first, second):
        assert record(memory_id).status == MemoryRecord.Status.EXPIRED
        assert record(memory_id).status_reason == "Project C closed."
    page.goto("/audit/?action=record.expired")
    audit_rows = page.locator("#table table tbody tr")
    expect(audit_rows).to_have_count(2)
    for memory_id in (first, second):
        row = audit_rows.filter(has=page.get_by_role("link", name=memory_id, exact=True))
        expect(row.locator("td").nth(2)).to_have_text("expired")  # the action in words (record.expired)
        expect(row).to_contain_text("Project C closed.")
    assert not AuditEvent.objects.filter(action="record.excluded", object_id__in=[first, second]).exists()


def test_a_deletion_is_filed_only_for_the_previewed_scope(page: Page) -> None:
    """Preview one memory id, then widen the scope in the page (as devtools would) to two: refused, nothing
    filed; the untouched preview then files exactly the one id."""
    sign_in(page, "compliance@demo")
    page.goto("/deletions/new/")
    page.get_by_label("Project id").fill("project-a")
    page.get_by_label("Scope kind").select_option("memory_ids")
    page.get_by_label("Scope value").fill("mem-sato-room")
    page.get_by_label("Reason").fill("The person asked to be forgotten.")
    page.get_by_test_id("preview-deletion").click()

    scope = page.get_by_test_id("previewed-scope")
    expect(scope).to_contain_text("mem-sato-room")
    expect(page.get_by_label("Scope value")).to_have_count(0)  # read-only now: no field to edit
    hidden = page.locator("input[type=hidden][name=scope_value]")
    expect(hidden).to_have_value("mem-sato-room")
    hidden.evaluate("input => { input.value = 'mem-sato-room,mem-sato-time'; }")
    page.get_by_test_id("confirm-deletion").click()

    expect(page.locator("p.error")).to_contain_text("differs from the preview")
    expect(page.get_by_test_id("confirm-deletion")).to_have_count(0)
    assert not DeletionRequest.objects.exists()
    assert record("mem-sato-room").tombstoned_at is None and record("mem-sato-time").tombstoned_at is None

    # Back on the form (with the widened value as posted): preview one id again, then file it.
    page.get_by_label("Scope value").fill("mem-sato-room")
    page.get_by_test_id("preview-deletion").click()
    expect(page.get_by_test_id("previewed-scope")).to_contain_text("mem-sato-room")
    page.get_by_test_id("confirm-deletion").click()

    filed = DeletionRequest.objects.get()
    expect(page.locator(".messages .msg-success")).to_contain_text(
        f"Deletion filed for 1 record in {filed.project.key}"
    )
    assert filed.scope_value == ["mem-sato-room"]
    assert record("mem-sato-time").tombstoned_at is None
