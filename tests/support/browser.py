"""The browser tests' fixtures: Playwright driving Debian's Chromium against the live server, and a demo-seeded
database. tests/conftest.py loads this module as a plugin (`pytest_plugins`), so `browser`, `demo` and `page`
are fixtures in every folder; `sign_in` and the constants are imported from here.

Needs /usr/bin/chromium (`bin/ensure-chromium` installs it; `make test` runs that first). Without it the
browser tests fail, they are not skipped. A failing test leaves a screenshot in var/test-artifacts/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.base import AXE_FILE_PATH
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support import ARTIFACTS

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "demo"

DEADLINE_FACT = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"

# The live server listens on the loopback address only, and the browser talks to nothing else.
os.environ.setdefault("DJANGO_LIVE_TEST_SERVER_ADDRESS", "127.0.0.1")

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


class _KeepReports:
    """Keeps each phase's report on its item, so the page fixture knows whether the test failed.

    pytest ignores hooks written in a test module, so this one is registered as a plugin at run time.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        item.stash.setdefault(_REPORTS, {})[report.when] = report
        return report


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run `bin/ensure-chromium` (as root it installs Debian's chromium package).",
            pytrace=False,
        )
    plugins = request.config.pluginmanager
    if not plugins.has_plugin("browser-test-reports"):
        plugins.register(_KeepReports(), "browser-test-reports")
    # Playwright's sync API keeps an event loop running in this thread; the ORM calls the tests make
    # here (seeding, checking the database) are still plain synchronous code.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()


@pytest.fixture
def demo(transactional_db: None) -> None:
    call_command("seed_demo", "--subjects", "30", stdout=StringIO())


@pytest.fixture
def page(browser: Browser, live_server: Any, demo: None, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    # Belt and braces: any request that is not for the live server on loopback is refused.
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
    tab = context.new_page()
    yield tab
    try:
        reports = request.node.stash.get(_REPORTS, {})
        if any(r.failed for r in reports.values()):
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^\w.-]+", "_", request.node.name)
            tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    finally:
        context.close()


def sign_in(page: Page, username: str) -> None:
    page.goto("/login/")
    page.get_by_label("Login").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def serious_violations(tab: Page) -> list[str]:
    """axe-core's serious and critical violations on the page, each with its first targets. The copy bundled in
    axe-playwright-python is injected by the DevTools protocol (the page's CSP does not apply, nothing is
    fetched)."""
    tab.evaluate(Path(AXE_FILE_PATH).read_text(encoding="utf-8"))
    results: dict[str, Any] = tab.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found = []
    for v in results["violations"]:
        if v["impact"] in ("serious", "critical"):
            targets = [", ".join(map(str, n["target"])) for n in v["nodes"][:3]]
            found.append(f"{v['id']} ({v['impact']}): {v['help']} at {targets}")
    return found
