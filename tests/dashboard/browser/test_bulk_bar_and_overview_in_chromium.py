"""Issue 34, items 6 and 10 in Chromium: two records selected and expired through the selection bar at a desktop's
1440 px and a phone's 390 px (the bar names the verb and the count, the confirmation what stops reaching agents;
axe finds nothing serious), and the overview at 1440 px with no tile left alone on a row (measured from the tiles'
boxes). Screenshots go to VAR_DIR/screenshots/ for people to look at (not committed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from playwright.sync_api import Browser, Page, expect

from memory_admin.memory.models import Dispute, MemoryRecord
from tests.support.axe import serious_violations
from tests.support.browser import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(settings.VAR_DIR) / "screenshots"


def _tab(browser: Browser, live_server: Any, width: int) -> Page:
    context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
    context.set_default_timeout(10_000)
    context.set_default_navigation_timeout(30_000)
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
    return context.new_page()


@pytest.mark.parametrize("width", [1440, 390])
def test_two_records_are_expired_through_the_selection_bar(
    browser: Browser, live_server: Any, demo: None, width: int
) -> None:
    tab = _tab(browser, live_server, width)
    try:
        sign_in(tab, "owner@demo")
        tab.goto("/records/?project=project-c")
        rows = tab.locator("#table table.records tbody tr")
        expect(rows.nth(1)).to_be_visible()
        first, second = rows.nth(0).get_attribute("id"), rows.nth(1).get_attribute("id")
        assert first and second
        bar = tab.get_by_test_id("bulk-bar")
        expect(bar).to_be_hidden()

        tab.get_by_label(f"Select {first}", exact=True).check()
        expect(bar).to_be_visible()
        expect(tab.get_by_role("button", name="Expire 1 record", exact=True)).to_be_visible()
        tab.get_by_label(f"Select {second}", exact=True).check()
        expect(bar.locator("[data-selected-count]")).to_have_text("2 selected")
        expect(tab.get_by_role("button", name="Exclude 2 records", exact=True)).to_be_visible()
        expire = tab.get_by_role("button", name="Expire 2 records", exact=True)
        expect(expire).to_be_visible()
        assert serious_violations(tab) == []
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(SCREENSHOTS / f"records-selection-bar-{width}.png"), full_page=False)
        expire.click()

        expect(tab.get_by_role("heading", name="Expire 2 records")).to_be_visible()
        stops = tab.get_by_test_id("stops-reaching-agents").locator("li")
        expect(stops).to_have_count(2)
        for memory_id in (first, second):
            fact = MemoryRecord.objects.get(memory_id=memory_id)
            expect(stops.filter(has_text=f"{fact.subject_id} · {fact.predicate}")).to_have_count(1)
        expect(tab.get_by_test_id("bulk-consequence")).to_contain_text(
            "Agents stop getting these values for answering and acting."
        )
        assert serious_violations(tab) == []
        assert int(tab.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")) <= 0
        tab.screenshot(path=str(SCREENSHOTS / f"records-bulk-confirm-{width}.png"), full_page=True)
        assert {MemoryRecord.objects.get(memory_id=m).status for m in (first, second)} == {"accepted"}

        tab.get_by_test_id("bulk-reason").fill("Project C closed.")
        tab.get_by_test_id("bulk-confirm").click()
        expect(tab.locator(".messages .msg-success")).to_contain_text("Expired 2 records")
        assert {MemoryRecord.objects.get(memory_id=m).status for m in (first, second)} == {"expired"}
    finally:
        tab.context.close()


# The tiles' boxes grouped into rows by their top edge: how many tiles each row holds.
_TILE_ROWS = """() => {
  const rows = new Map();
  for (const tile of document.querySelectorAll('[data-testid="tiles"] a.tile')) {
    const top = Math.round(tile.getBoundingClientRect().top);
    rows.set(top, (rows.get(top) || 0) + 1);
  }
  return [...rows.entries()].sort((a, b) => a[0] - b[0]).map(([, n]) => n);
}"""


def test_the_overview_at_1440_leaves_no_tile_alone_on_a_row(browser: Browser, live_server: Any, demo: None) -> None:
    tab = _tab(browser, live_server, 1440)
    try:
        sign_in(tab, "owner@demo")
        # Measure once the stylesheet is applied: before it, the tiles are inline links wrapping anywhere.
        tab.wait_for_load_state("load")
        expect(tab.get_by_test_id("tiles")).to_have_css("display", "grid")
        rows: list[int] = tab.evaluate(_TILE_ROWS)
        assert sum(rows) == len(MemoryRecord.Status.values) + 2
        assert len(rows) > 1 and all(n > 1 for n in rows), f"tiles per row: {rows}"
        assert len(set(rows)) == 1, f"rows of unequal length: {rows}"
        expect(tab.get_by_text("Counts are of records")).to_have_count(0)
        expect(tab.get_by_test_id("freshness").locator(".fresh-breakdown li")).to_have_count(4)
        assert serious_violations(tab) == []
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(SCREENSHOTS / "overview-tiles-1440.png"), full_page=True)
    finally:
        tab.context.close()


def test_a_resolution_is_undone_from_the_disputes_page(browser: Browser, live_server: Any, demo: None) -> None:
    """Issue 34, item 9: resolve, read what agents now get with a link back to the fact, undo, open again."""
    dispute = Dispute.objects.get(status="open")
    tab = _tab(browser, live_server, 1440)
    try:
        sign_in(tab, "owner@demo")
        tab.goto("/disputes/")
        card = tab.locator(f"section#{dispute.public_id}")
        expect(card.locator(".side-source")).to_have_count(2)
        # Each side named by its source; the sides come in the order they were written.
        assert sorted(card.locator(".side-source").all_inner_texts()) == [
            "From partner-catalog:product-x",
            "From vendor-site:product-x",
        ]
        expect(card.locator(".side-who").first).to_contain_text("reported by price-feed-")
        tab.get_by_test_id("winner-mem-price-partner").check()
        tab.get_by_test_id("resolve-reason").fill("The partner catalogue is binding.")
        tab.get_by_test_id("resolve-submit").click()

        expect(tab.locator(".messages .msg-success")).to_have_text(
            "Resolved product-x · unit_price: agents now get ¥1,350, from partner-catalog:product-x."
        )
        expect(card).to_contain_text("¥1,350, from partner-catalog:product-x, won.")
        expect(card.get_by_test_id("back-to-fact")).to_have_attribute(
            "href", "/facts/?project=project-a&subject=product-x&predicate=unit_price"
        )
        assert serious_violations(tab) == []
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(SCREENSHOTS / "dispute-resolved-undo-1440.png"), full_page=True)
        card.get_by_test_id("undo-resolution").click()

        expect(tab.locator(".messages .msg-success")).to_contain_text("is open again")
        assert Dispute.objects.get(pk=dispute.pk).status == "open"
        assert set(dispute.candidates.values_list("status", flat=True)) == {"disputed"}
    finally:
        tab.context.close()
