"""The fact page in Chromium at a desktop's 1440 px and a phone's 390 px (issue 34, items 4, 7 and 8): its
sections open and close, the keyboard moves between facts (j/k and ]/[, never while typing), the as-of control
takes the app's date format and its quick picks, and the page passes axe with no serious violation and reads as
people's words. A screenshot of each width goes to var/test-artifacts/ for people to look at."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support import ARTIFACTS
from tests.support.browser import DEADLINE_FACT, PASSWORD, serious_violations
from tests.support.ux_checks import assert_reads_as_people

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OCT_30 = "Fri 30 Oct 2026, 17:00 JST"  # the demo deadlines as the page shows them (tenant zone)
NOV_2 = "Mon 2 Nov 2026, 17:00 JST"


def _sign_in(tab: Page) -> None:
    tab.goto("/login/")
    tab.get_by_label("Login").fill("owner@demo")
    tab.get_by_label("Password").fill(PASSWORD)
    tab.get_by_role("button", name="Sign in").click()
    expect(tab.get_by_role("heading", name="Overview")).to_be_visible()


def _same_place(tab: Page, href: str | None) -> re.Pattern[str]:
    assert href
    return re.compile(re.escape(urljoin(tab.url, href)) + "$")


def _check(tab: Page, width: int, problems: list[str]) -> None:
    problems += [f"{width}px: {v}" for v in serious_violations(tab)]
    overflow = int(tab.evaluate("document.scrollingElement.scrollWidth - window.innerWidth"))
    if overflow > 0:
        problems.append(f"{width}px: {overflow}px of horizontal scroll")
    assert_reads_as_people(tab.content(), page=f"the fact page at {width}px")


@pytest.mark.parametrize("width", [1440, 390])
def test_the_fact_page_collapses_moves_by_keyboard_and_asks_as_of_in_the_apps_format(
    browser: Browser, live_server: Any, demo: None, width: int
) -> None:
    context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
    context.set_default_timeout(10_000)
    context.set_default_navigation_timeout(30_000)
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
    tab = context.new_page()
    problems: list[str] = []
    try:
        _sign_in(tab)
        tab.goto(DEADLINE_FACT)
        expect(tab.get_by_test_id("fact-headline")).to_contain_text(re.compile(r"^Current"))
        expect(tab.get_by_test_id("fact-headline")).to_contain_text("checked")

        # Sections: the history is open with its chart, the audit log closed until its heading is pressed.
        history, audit = tab.locator("details#history"), tab.locator("details#audit")
        expect(tab.get_by_test_id("timeplot")).to_be_visible()
        expect(tab.locator("#mem-deadline-late-import")).to_contain_text("Version 3 of 3")
        expect(tab.locator("#mem-deadline-late-import")).to_contain_text("source r16")
        expect(tab.locator('g.version[data-memory-id="mem-deadline-late-import"] .version-name')).to_have_text(
            "version 3 of 3"
        )
        expect(audit.locator("table")).to_be_hidden()
        audit.locator("summary").click()
        expect(audit.locator("table")).to_be_visible()
        expect(audit.locator("table")).to_contain_text("version 2 of 3")
        history.locator("summary").click()
        expect(tab.get_by_test_id("timeplot")).to_be_hidden()
        history.locator("summary").click()
        expect(tab.get_by_test_id("timeplot")).to_be_visible()
        _check(tab, width, problems)

        # As of: a quick pick, then a date typed in the app's format, then one the control cannot read.
        answer = tab.locator("#asof .asof-value")
        tab.get_by_test_id("quick-picks").get_by_role("link", name="Version 1 of 3 took effect").click()
        expect(answer).to_have_text(OCT_30)
        expect(tab.get_by_test_id("valid-at")).to_have_value("Tue 20 Oct 2026, 09:00")
        expect(tab.locator("#asof")).to_contain_text("version 1 of 3")
        tab.get_by_test_id("quick-picks").get_by_role("link", name="Version 2 of 3 took effect").click()
        expect(answer).to_have_text(NOV_2)
        tab.get_by_test_id("quick-picks").get_by_role("link", name="A week ago").click()
        expect(answer).to_have_text(NOV_2)
        expect(tab.get_by_test_id("asof-error")).to_have_count(0)

        valid_at = tab.get_by_test_id("valid-at")
        valid_at.fill("Wed 21 Oct 2026, 12:00")
        tab.get_by_role("button", name="Ask").click()
        expect(answer).to_have_text(OCT_30)
        valid_at.fill("21/10/2026")
        tab.get_by_role("button", name="Ask").click()
        expect(tab.get_by_test_id("asof-error")).to_contain_text("Valid at: Enter a date and time such as")
        _check(tab, width, problems)
        if width == 1440:
            tab.get_by_test_id("quick-picks").get_by_role("link", name="Version 1 of 3 took effect").click()
            expect(answer).to_have_text(OCT_30)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(ARTIFACTS / f"fact-page-{width}.png"), full_page=True)
        assert (ARTIFACTS / f"fact-page-{width}.png").stat().st_size > 0

        # Keys move between facts; typing the same letters in a field does not. From a fact with a fact on either
        # side (the deadline, or the one before it when the deadline is the project's last).
        tab.goto(DEADLINE_FACT)
        nav = tab.get_by_test_id("fact-nav")
        if nav.locator('a[rel="next"]').count() == 0:
            nav.locator('a[rel="prev"]').click()
            expect(tab).not_to_have_url(_same_place(tab, DEADLINE_FACT))
        start = tab.url
        following = nav.locator('a[rel="next"]').get_attribute("href")
        previous = nav.locator('a[rel="prev"]').get_attribute("href")
        valid_at = tab.get_by_test_id("valid-at")
        valid_at.click()
        valid_at.press_sequentially("j]k[")
        expect(valid_at).to_have_value("j]k[")
        expect(tab).to_have_url(start)
        tab.locator("h1").click()  # out of the field
        tab.keyboard.press("j")
        expect(tab).to_have_url(_same_place(tab, following))
        tab.wait_for_load_state("load")  # its script listens for keys once loaded
        tab.keyboard.press("k")
        expect(tab).to_have_url(start)
        tab.wait_for_load_state("load")
        tab.keyboard.press("[")
        expect(tab).to_have_url(_same_place(tab, previous))
        tab.wait_for_load_state("load")  # its script listens for keys once loaded
        tab.keyboard.press("]")
        expect(tab).to_have_url(start)
        # The links are there without a keyboard too, named by the fact they lead to.
        expect(nav.locator('a[rel="next"]')).to_contain_text("Next:")
        expect(nav.locator('a[rel="prev"]')).to_contain_text("Previous:")
    finally:
        context.close()
    assert problems == [], "\n".join(problems)
