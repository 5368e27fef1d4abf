"""The Content Security Policy in a real browser: Chromium refuses nothing on the dashboard's pages, its
htmx interactions, the error pages and Swagger UI (a refused script or style is logged on the console)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from tests.support.browser import DEADLINE_FACT, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _refusals(tab: Page) -> list[str]:
    refused: list[str] = []

    def keep(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            refused.append(message.text)

    tab.on("console", keep)
    # Also the DOM event, which names the directive even when the console message is suppressed.
    tab.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation',"
        " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
    )
    return refused


def _events(tab: Page) -> list[str]:
    return list(tab.evaluate("window.__csp || []"))


def test_the_pages_and_their_htmx_run_under_the_policy(page: Page, live_server: Any) -> None:
    refused = _refusals(page)
    response = page.goto("/login/")
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy
    sign_in(page, "owner@demo")
    seen: list[str] = []
    for path in ["/", "/disputes/", "/rechecks/", "/agents/", "/retrieval/", "/audit/", "/deletions/", "/exports/"]:
        page.goto(path)
        seen += _events(page)

    # htmx still swaps the records table in place as a filter is typed (no eval, no injected style).
    page.goto("/records/")
    rows = page.locator("#table tbody tr")
    expect(rows.first).to_be_visible()
    page.evaluate("window.__sameDocument = true")
    page.get_by_label("Subject", exact=True).fill("task-proposal-017")
    page.get_by_label("Subject", exact=True).press("Enter")
    expect(page).to_have_url(re.compile(r"subject=task-proposal-017"))
    expect(page.locator("#table")).to_contain_text("task-proposal-017")
    assert page.evaluate("window.__sameDocument") is True, "htmx did not swap the table: the page reloaded"
    seen += _events(page)

    page.goto(DEADLINE_FACT)
    expect(page.locator("#asof")).to_be_visible()
    seen += _events(page)

    page.goto("/no-such-page/")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    seen += _events(page)
    assert refused == [] and seen == []


def test_swagger_ui_runs_under_the_policy(page: Page, live_server: Any) -> None:
    refused = _refusals(page)
    page.goto("/api/v1/docs/")
    # Swagger UI draws the operations only when its bundle and start-up script both ran.
    expect(page.locator(".opblock").first).to_be_visible(timeout=20_000)
    assert refused == [] and _events(page) == []


def test_the_django_admin_runs_under_the_policy(page: Page) -> None:
    refused = _refusals(page)
    sign_in(page, "admin@demo")
    page.goto("/admin/")
    expect(page.locator("#site-name")).to_be_visible()
    # The admin's theme toggle is wired up by its own script file (theme.js): it works only if that ran.
    toggle = page.locator("button.theme-toggle").first
    before = page.evaluate("document.documentElement.dataset.theme || 'auto'")
    toggle.click()
    assert page.evaluate("document.documentElement.dataset.theme") != before
    assert refused == [] and _events(page) == []
