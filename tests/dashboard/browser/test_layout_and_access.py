"""Layout and access in a real browser: every page of the navigation, and the detail pages (a fact, a dispute,
a deletion in progress, its report, a policy), as owner, admin and compliance, at a phone's 390 px and a
desktop's 1440 px. No page scrolls sideways, and axe-core (the copy bundled in axe-playwright-python, injected
from the package file, never fetched) finds no serious or critical violation. The owner's run also saves
screenshots under VAR_DIR/screenshots/ for people to look at (not committed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.base import AXE_FILE_PATH
from django.conf import settings
from playwright.sync_api import Browser, Page, expect

from deletion import service
from deletion.models import DeletionRequest, StoreProgress
from deletion.tasks import purge_store
from memory_admin.accounts.models import Principal
from memory_admin.memory.models import Dispute, FieldPolicy
from tests.support.browser import DEADLINE_FACT, PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (390, 1440)
AXE_SCRIPT = Path(AXE_FILE_PATH).read_text(encoding="utf-8")
SCREENSHOTS = Path(settings.VAR_DIR) / "screenshots"
# Pages the navigation links to that are not the dashboard's own: Swagger UI and the Django admin.
FOREIGN = re.compile(r"^/(api|admin)/")


def _deletion_in_progress() -> DeletionRequest:
    """A subject deletion part-way: some stores purged and verified, one failed (so "retry" shows), the rest
    waiting for the worker (none runs here)."""
    compliance = Principal.objects.get(username="compliance@demo")
    filed = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": "person-sato"}, reason="The person asked."
    )
    assert isinstance(filed, DeletionRequest)
    stores = {p.store: p for p in filed.stores.all()}
    for name in ("records", "logs", "summaries"):
        if name in stores:
            purge_store.apply(args=[stores[name].pk])
    StoreProgress.objects.filter(pk=stores["caches"].pk).update(
        state=StoreProgress.State.FAILED, attempts=3, last_error="The cache did not answer within 5 seconds."
    )
    return filed


def _pages(tab: Page, role: str, deletion: DeletionRequest) -> list[str]:
    """The navigation's pages for this role (read from the page itself), then the detail pages."""
    tab.goto("/")
    hrefs = tab.locator("header nav a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    paths = [h for h in hrefs if h and not FOREIGN.match(h)]
    dispute = Dispute.objects.filter(status="open").first()
    assert dispute is not None
    paths += [
        DEADLINE_FACT,
        f"/disputes/#{dispute.public_id}",
        f"/deletions/{deletion.public_id}/",
        f"/deletions/{deletion.public_id}/report/",
    ]
    if role == "admin":
        policy = FieldPolicy.objects.order_by("pk").first()
        assert policy is not None
        paths += [f"/policies/{policy.pk}/", "/policies/new/"]
    if role == "compliance":
        paths += ["/deletions/new/"]
    if role == "owner":
        paths += ["/tokens/"]  # refused: the page that says so
    paths += ["/no-such-page/"]
    return list(dict.fromkeys(paths))


# Pages whose refusal is the page under test.
EXPECTED_STATUS = {"/tokens/": {"owner": 403}, "/no-such-page/": {"owner": 404, "admin": 404, "compliance": 404}}


def _overflow(tab: Page) -> int:
    """How far the page is wider than the window (0: no horizontal page scroll)."""
    return int(tab.evaluate("document.scrollingElement.scrollWidth - window.innerWidth"))


# The innermost elements that reach past the window's right edge, to say what overflows when a page does.
_WIDE = """() => {
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    const wide = (e) => e.getBoundingClientRect().right > window.innerWidth + 1;
    if (wide(el) && ![...el.children].some(wide)) {
      out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '') + ' ' + Math.round(r.right) + 'px');
    }
  }
  return out.slice(0, 4);
}"""


def _too_wide(tab: Page) -> str:
    return ", ".join(tab.evaluate(_WIDE))


def _serious_violations(tab: Page) -> list[str]:
    tab.evaluate(AXE_SCRIPT)  # by the DevTools protocol: the page's CSP does not apply, nothing is fetched
    results: dict[str, Any] = tab.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found = []
    for v in results["violations"]:
        if v["impact"] in ("serious", "critical"):
            targets = [", ".join(map(str, n["target"])) for n in v["nodes"][:3]]
            found.append(f"{v['id']} ({v['impact']}): {v['help']} at {json.dumps(targets)}")
    return found


# What a person must never read on a page: ISO timestamps, JSON objects, Python reprs of dicts and lists.
MACHINE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}|\{['\"]\w+['\"]:|\['[^']*'(, '|\])|\bNone\b")


def _machine_text(tab: Page) -> list[str]:
    text = str(tab.evaluate("document.body.innerText"))
    return sorted({m.group(0) for m in MACHINE_TEXT.finditer(text)})[:3]


def _sign_in(tab: Page, username: str) -> None:
    tab.goto("/login/")
    tab.get_by_label("Login").fill(username)
    tab.get_by_label("Password").fill(PASSWORD)
    tab.get_by_role("button", name="Sign in").click()
    expect(tab).not_to_have_url(re.compile(r"/login/"))


def _check_every_page(browser: Browser, live_server: Any, role: str, shots: dict[str, str] | None = None) -> None:
    deletion = _deletion_in_progress()
    problems: list[str] = []
    for width in WIDTHS:
        context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
        context.set_default_timeout(10_000)
        context.set_default_navigation_timeout(30_000)  # axe and full pages on a shared 2-core machine
        context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
        tab = context.new_page()
        try:
            # The sign-in page first, as nobody.
            tab.goto("/login/")
            if (extra := _overflow(tab)) > 0:
                problems.append(f"{width}px /login/: {extra}px of horizontal scroll")
            problems += [f"{width}px /login/: {v}" for v in _serious_violations(tab)]
            _sign_in(tab, f"{role}@demo")
            for path in _pages(tab, role, deletion):
                response = tab.goto(path)
                assert response is not None
                expected = EXPECTED_STATUS.get(path, {}).get(role, 200)
                if response.status != expected:
                    problems.append(f"{width}px {path}: status {response.status}, not {expected}")
                tab.wait_for_load_state("load")
                if (extra := _overflow(tab)) > 0:
                    problems.append(f"{width}px {path}: {extra}px of horizontal scroll ({_too_wide(tab)})")
                problems += [f"{width}px {path}: {v}" for v in _serious_violations(tab)]
                if width == WIDTHS[0] and (machine := _machine_text(tab)):
                    problems.append(f"{path}: machine text shown to a person: {machine}")
            if shots:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                for name, path in shots.items():
                    tab.goto(path.replace("{deletion}", deletion.public_id))
                    tab.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
        finally:
            context.close()
    assert problems == [], "\n".join(problems)


def test_every_owner_page_fits_a_phone_and_passes_axe(browser: Browser, live_server: Any, demo: None) -> None:
    dispute = Dispute.objects.filter(status="open").first()
    assert dispute is not None
    shots = {
        "overview": "/",
        "records": "/records/",
        "fact": DEADLINE_FACT,
        "disputes": "/disputes/",
        "deletion-in-progress": "/deletions/{deletion}/",
        "deletion-report": "/deletions/{deletion}/report/",
    }
    _check_every_page(browser, live_server, "owner", shots)
    for name in shots:
        for width in WIDTHS:
            assert (SCREENSHOTS / f"{name}-{width}.png").stat().st_size > 0


def test_every_admin_page_fits_a_phone_and_passes_axe(browser: Browser, live_server: Any, demo: None) -> None:
    _check_every_page(browser, live_server, "admin")


def test_every_compliance_page_fits_a_phone_and_passes_axe(browser: Browser, live_server: Any, demo: None) -> None:
    _check_every_page(browser, live_server, "compliance")


def test_the_policy_form_shows_the_chosen_connectors_settings_as_it_is_chosen(
    browser: Browser,
    live_server: Any,
    demo: None,
) -> None:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 900})
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
    tab = context.new_page()
    try:
        _sign_in(tab, "admin@demo")
        tab.goto("/policies/new/")
        url = tab.get_by_label("URL template")
        expect(url).to_be_hidden()
        expect(tab.get_by_test_id("show-connector")).to_be_hidden()  # v-policy.js ran: no round trip needed
        tab.get_by_label("Connector").select_option("http_json")
        expect(url).to_be_visible()
        expect(tab.get_by_test_id("test-settings")).to_be_visible()
        tab.get_by_label("Connector").select_option("manual")
        expect(url).to_be_hidden()
    finally:
        context.close()


def test_a_refused_resolution_keeps_the_chosen_side_and_says_why_beside_the_reason(
    browser: Browser,
    live_server: Any,
    demo: None,
) -> None:
    dispute = Dispute.objects.get(subject_id="product-x", predicate="unit_price", status="open")
    context = browser.new_context(base_url=live_server.url, viewport={"width": 390, "height": 900})
    context.set_default_navigation_timeout(30_000)
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/])"), lambda route: route.abort())
    tab = context.new_page()
    try:
        _sign_in(tab, "owner@demo")
        tab.goto("/disputes/")
        card = tab.locator(f"section.dispute#{dispute.public_id}")
        expect(card.locator("mark.diff").first).to_be_visible()  # what differs is marked
        card.get_by_test_id("winner-mem-price-partner").check()
        card.get_by_test_id("resolve-submit").click()
        expect(card.get_by_test_id("reason-error")).to_contain_text("Give a reason")
        expect(card.get_by_test_id("winner-mem-price-partner")).to_be_checked()
        expect(card.get_by_test_id("resolve-reason")).to_have_attribute("aria-invalid", "true")
        dispute.refresh_from_db()
        assert dispute.status == "open"
    finally:
        context.close()
