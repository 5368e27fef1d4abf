"""The dashboard in people's words: the overview as an inbox by role, health figures that agree, the fact
page's plot and states, the records table, and no ISO strings, JSON or Python reprs on any of these pages
(tests/support/ux_checks.py). Django's test client on demo-like data; one Chromium test for the plot and the
select-all bar (the only JavaScript these pages add)."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from deletion import service as deletion_service
from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, RecheckAttempt
from tests.support.browser import sign_in
from tests.support.ux_checks import assert_reads_as_people, machine_text

DEADLINE = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"
PRICE = "/facts/?project=project-a&subject=product-x&predicate=unit_price"
LIMIT = "/facts/?project=project-a&subject=expense-policy&predicate=approval_limit"
RICH = "/facts/?project=project-a&subject=report-9&predicate=metrics"
ROLES = ["owner@demo", "admin@demo", "compliance@demo"]


@pytest.fixture
def story(db: None) -> None:
    """The demo story (no synthetic volume), plus values of every shape: a mapping with a list of
    mappings and an ISO date inside, and a list of ids."""
    call_command("seed_demo", "--subjects", "0", stdout=StringIO())
    agent = Principal.objects.get(username="agent@demo")
    when = timezone.now() - timedelta(days=2)
    for predicate, value in [
        ("metrics", {"samples": [{"at": "2026-11-01T10:00:00+09:00", "count": 12345}], "unit_price": 9.5}),
        ("related", ["mem-aaa", "mem-bbb"]),
        ("budget", {"amount": 2500000, "currency": "JPY"}),
    ]:
        assert_fact(
            agent,
            Assertion(
                project_id="project-a",
                subject_id="report-9",
                predicate=predicate,
                value=value,
                valid_from=when,
                source_canonical_ref="reports:9",
                source_revision="2026-11-30",
            ),
            now=when,
            verified_at=when,
        )


def client_for(username: str) -> Client:
    client = Client()
    client.force_login(Principal.objects.get(username=username))
    return client


def html(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def inbox_links(page_html: str) -> dict[str, list[str]]:
    """kind -> the links of the overview's inbox items of that kind."""
    found: dict[str, list[str]] = {}
    for kind, href in re.findall(r'data-kind="(\w+)">\s*<span[^>]*>[^<]*</span>\s*<a href="([^"]+)"', page_html):
        found.setdefault(kind, []).append(href.replace("&amp;", "&"))
    return found


# --- No machine text ----------------------------------------------------------------------------


@pytest.mark.parametrize("username", ROLES)
def test_no_page_shows_iso_strings_json_or_reprs(story: None, username: str) -> None:
    client = client_for(username)
    record = MemoryRecord.objects.get(memory_id="mem-deadline-002")
    urls = [
        "/",
        "/records/",
        "/records/?status=all",
        "/records/?status=superseded",
        "/records/?status=all&sort=-valid_from",
        "/records/?subject=report-9",
        DEADLINE,
        DEADLINE + "&valid_at=2026-10-21T12%3A00",
        PRICE,
        LIMIT,
        RICH,
        "/facts/?project=project-a&subject=report-9&predicate=related",
        "/audit/",
        "/rechecks/",
        "/agents/",
    ]
    for url in urls:
        assert_reads_as_people(html(client, url), page=f"{url} as {username}")
    if username != "compliance@demo":
        confirm = client.post(f"/records/{record.memory_id}/exclude/", {"reason": "wrong"})
        assert confirm.status_code == 200
        assert_reads_as_people(confirm.content.decode(), page="the exclude confirmation")


def test_the_checker_catches_machine_text() -> None:
    assert machine_text("<p>Due 2026-11-02T17:00:00+09:00</p>")
    assert machine_text("<td>{'samples': 3}</td>")
    assert machine_text('<td>{"samples": 3}</td>')
    assert machine_text("<td>['mem-1']</td>")
    assert machine_text("<td>1 day, 0:00:00</td>")
    assert machine_text("<td>P1DT00H00M00S</td>")
    assert machine_text("<td>&lt;MemoryRecord: x&gt;</td>")
    assert not machine_text('<time datetime="2026-11-02T17:00:00+09:00" title="2026-11-02">Mon 2 Nov 2026</time>')
    assert not machine_text('<input value="2026-10-21T12:00"><script>var a = {"b": 1};</script>')


def test_values_show_by_type_on_the_fact_page(story: None) -> None:
    page_html = html(client_for("owner@demo"), RICH)
    assert '<table class="value-table">' in page_html
    assert "Samples" in page_html and "12,345" in page_html and "Sun 1 Nov 2026, 10:00 JST" in page_html
    budget = html(client_for("owner@demo"), "/facts/?project=project-a&subject=report-9&predicate=budget")
    assert "¥2,500,000" in budget


# --- The overview as an inbox -------------------------------------------------------------------


def test_an_owner_is_asked_to_resolve_disputes_recheck_high_risk_fields_and_chase_notices(story: None) -> None:
    page_html = html(client_for("owner@demo"), "/")
    links = inbox_links(page_html)
    dispute = Dispute.objects.get(status="open")
    assert links["dispute"] == [f"/disputes/#{dispute.public_id}"]
    assert DEADLINE in links["recheck"]  # high risk, past its recheck time
    assert "/facts/?project=project-a&subject=agent-mailer&predicate=send_permission" in links["recheck"]
    assert links["notice"] == ["/agents/"]
    assert "deletion" not in links and "policy" not in links
    assert "days overdue; actions on it are blocked until verified" in page_html


def test_compliance_is_asked_about_deletions_with_days_left_and_nothing_else(story: None) -> None:
    compliance = Principal.objects.get(username="compliance@demo")
    request = deletion_service.request_deletion(
        compliance,
        project_id="project-a",
        scope={"predicate": "meeting_room"},
        reason="the room plan is personal data",
        due_by=timezone.localdate() + timedelta(days=12),
    )
    assert isinstance(request, DeletionRequest)
    page_html = html(client_for("compliance@demo"), "/")
    links = inbox_links(page_html)
    assert links == {"deletion": [f"/deletions/{request.public_id}/"]}
    assert "awaiting a second approval; 12 days left" in page_html
    # Named by what it covers (issue 34, item 1): the request's id is on its own page, not in the inbox.
    assert "Deletion of every fact of the field meeting_room in project-a" in page_html
    assert_reads_as_people(page_html, page="/")


def test_an_admin_is_asked_to_fix_a_policy_whose_source_failed_its_last_check(story: None) -> None:
    policy = FieldPolicy.objects.filter(canonical_source__isnull=False).exclude(canonical_source={}).first()
    assert policy is not None
    record = MemoryRecord.objects.filter(predicate=policy.predicate).first()
    assert record is not None
    RecheckAttempt.objects.create(
        tenant_id=record.tenant_id, record=record, outcome="source_unavailable", trigger="sweep", error="timed out"
    )
    links = inbox_links(html(client_for("admin@demo"), "/"))
    assert links["policy"] == [f"/policies/{policy.pk}/"]
    assert "policy" not in inbox_links(html(client_for("owner@demo"), "/"))
    RecheckAttempt.objects.create(
        tenant_id=record.tenant_id, record=record, outcome="verified_unchanged", trigger="sweep"
    )
    assert "policy" not in inbox_links(html(client_for("admin@demo"), "/"))


def test_the_health_figures_agree_and_explain_disputes(story: None) -> None:
    response = client_for("owner@demo").get("/")
    context: Any = response.context
    disputed = MemoryRecord.objects.filter(status="disputed").count()
    assert (disputed, context["open_disputes"]) == (2, 1)
    # The tiles explain themselves (no footnote): the disputed records are named as one per source in the disputes.
    assert "records, one per source, in 1 open dispute" in response.content.decode()
    assert "counts-explained" not in response.content.decode()
    # The overdue tile, the freshness card's red band and the records page's "recheck due" filter: the same records.
    chart = {band.key: band.n for band in context["bands"]}
    assert chart["due"] == context["overdue"] > 0
    due = client_for("owner@demo").get("/records/?freshness=recheck_due")
    assert due.context["total"] == context["overdue"]
    accepted = MemoryRecord.objects.filter(status="accepted").count()
    assert sum(chart.values()) == accepted


def test_recent_changes_read_as_subject_predicate_old_to_new_by_whom_newest_first(story: None) -> None:
    rows = client_for("owner@demo").get("/").context["recent"]
    times = [r.at for r in rows]
    assert times == sorted(times, reverse=True)
    page_html = html(client_for("owner@demo"), "/")
    text = re.sub(r"<[^>]+>", "", page_html)
    assert re.search(r"expense-policy · approval_limit:\s*50,000 → 100,000\s*by owner", text)


def test_an_agents_mcp_tool_calls_are_not_recent_changes(story: None) -> None:
    """Every MCP call is audited, reads included; the overview's recent changes show what changed."""
    from memory_admin.memory import audit

    agent = Principal.objects.get(username="agent@demo")
    before = [r.event.pk for r in client_for("owner@demo").get("/").context["recent"]]
    for _ in range(20):
        audit.record_event(
            tenant=agent.tenant_pk, actor=agent, action=audit.Action.MCP_TOOL_CALLED, object_type="mcp_tool",
            object_id="recall", after={"outcome": "ok"},
        )  # fmt: skip
    after = [r.event.pk for r in client_for("owner@demo").get("/").context["recent"]]
    assert after == before and after


# --- The fact page ------------------------------------------------------------------------------


def test_the_fact_plot_marks_current_late_and_scheduled_versions(story: None) -> None:
    client = client_for("owner@demo")
    deadline = html(client, DEADLINE)
    kinds = dict(re.findall(r'data-kind="(\w+)" data-memory-id="([\w-]+)"', deadline))
    by_id = {
        memory_id: kind for kind, memory_id in re.findall(r'data-kind="(\w+)" data-memory-id="([\w-]+)"', deadline)
    }
    assert by_id["mem-deadline-002"] == "current"
    assert by_id["mem-deadline-late-import"] == "late"
    assert by_id["mem-deadline-001"] == "superseded"
    assert 'class="marker marker-now"' in deadline and "marker-asof" not in deadline
    assert kinds
    asked = html(client, DEADLINE + "&valid_at=2026-10-21T12%3A00")
    assert re.search(r'data-kind="asof" data-memory-id="mem-deadline-001"', asked)
    assert 'class="marker marker-asof"' in asked
    fragment = client.get(DEADLINE + "&valid_at=2026-10-21T12%3A00", headers={"HX-Request": "true"})
    text = fragment.content.decode()
    assert text.lstrip().startswith('<div id="asof"') and 'id="plot" hx-swap-oob="true"' in text
    assert 'class="marker marker-asof"' in text
    limit = html(client, LIMIT)
    assert re.search(r'data-kind="scheduled" data-memory-id="[\w-]+"', limit)
    assert "becomes <strong>" in limit and "100,000" in limit


def test_the_fact_page_shows_blocked_actions_disputes_and_history_in_time_order(story: None) -> None:
    client = client_for("owner@demo")
    deadline = html(client, DEADLINE)
    assert 'data-testid="actions-blocked"' in deadline
    assert "<strong>Last verified value:</strong>" in deadline and "overdue" in deadline
    # Learned Oct 20 (r17), Oct 22 (r18), Oct 23 (the late r16): record time, not revision order.
    order = re.findall(r'<li id="(mem-deadline-[\w-]+)"', deadline)
    assert order == ["mem-deadline-001", "mem-deadline-002", "mem-deadline-late-import"]
    for line in ("The value changed at its source", "It must not be kept anywhere"):
        assert line in deadline
    price = html(client, PRICE)
    assert "¥1,200" in price and "¥1,350" in price and 'class="compact candidates"' in price
    assert html(client, LIMIT).count('<th scope="col">') >= 5  # every table has its headers


def test_exclude_asks_first_and_says_what_stops_reaching_agents(story: None) -> None:
    client = client_for("owner@demo")
    response = client.post("/records/mem-deadline-002/exclude/", {"reason": "wrong", "next": DEADLINE})
    text = response.content.decode()
    assert response.status_code == 200
    assert "Stops reaching agents" in text and "Mon 2 Nov 2026, 17:00 JST, the current answer" in text
    assert "agent session" in text
    assert MemoryRecord.objects.get(memory_id="mem-deadline-002").status == "accepted"


# --- The records table --------------------------------------------------------------------------


def test_records_show_scheduled_badges_and_no_freshness_on_history(story: None) -> None:
    client = client_for("owner@demo")
    current = html(client, "/records/?subject=expense-policy")
    assert "status-scheduled" in current
    history = html(client, "/records/?status=superseded")
    assert "fresh-" not in history.split('id="table"')[1]


def test_history_is_grouped_by_fact_with_a_total(story: None) -> None:
    response = client_for("owner@demo").get("/records/?status=all&project=project-a")
    text = response.content.decode()
    total = MemoryRecord.objects.filter(project__key="project-a").count()
    assert f"{total} records match" in text and "grouped by fact" in text
    groups = re.findall(r'<tr class="group-row">', text)
    facts = MemoryRecord.objects.filter(project__key="project-a").values("subject_id", "predicate").distinct()
    assert len(groups) == len(facts)


def test_sorted_columns_page_by_keyset_without_gaps_or_repeats(story: None) -> None:
    client = client_for("owner@demo")
    seen: list[str] = []
    url = "/records/?status=all&sort=-valid_from&size=4"
    while url:
        response = client.get(url)
        seen += [r.memory_id for r in response.context["rows"]]
        after = response.context["next_after"]
        url = f"/records/?status=all&sort=-valid_from&size=4&after={after}" if after else ""
    expected = list(MemoryRecord.objects.order_by("-valid_from", "-id").values_list("memory_id", flat=True))
    assert seen == expected


def test_select_all_works_without_javascript(story: None) -> None:
    text = html(client_for("owner@demo"), "/records/?select=all")
    boxes = re.findall(r'<input type="checkbox" name="ids" value="[\w-]+"[^>]*>', text)
    assert boxes and all("checked" in b for b in boxes)
    assert f"{len(boxes)} selected" in text
    assert "Select all on this page" in html(client_for("owner@demo"), "/records/")


# --- In Chromium ------------------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_plot_and_the_select_all_bar_in_a_browser(page: Page) -> None:
    sign_in(page, "owner@demo")
    page.goto(DEADLINE)
    plot = page.get_by_test_id("timeplot")
    expect(plot).to_be_visible()
    expect(plot.locator('g.version[data-kind="current"]')).to_have_count(1)
    expect(plot.locator('g.version[data-kind="late"]')).to_have_count(1)
    box = plot.locator('g.version[data-kind="current"] rect.span').bounding_box()
    assert box is not None and box["width"] > 10 and box["height"] > 5
    expect(plot.locator("g.marker-asof")).to_have_count(0)
    plot.locator('g.version[data-kind="late"] rect.span').click()
    expect(page).to_have_url(re.compile(r"#mem-deadline-late-import$"))

    # Asking "as of" swaps the answer and, out of band, the plot with the as-of version and mark.
    page.get_by_test_id("valid-at").fill("2026-10-21T12:00")
    page.get_by_role("button", name="Ask").click()
    expect(page.get_by_test_id("timeplot").locator("g.marker-asof")).to_have_count(1)
    expect(page.get_by_test_id("timeplot").locator('g.version[data-kind="asof"]')).to_have_attribute(
        "data-memory-id", "mem-deadline-001"
    )

    page.goto("/records/")
    select_all = page.get_by_label("Select every record on this page")
    expect(select_all).to_be_visible()  # shown by the script; hidden without JavaScript
    expect(page.locator(".no-js-select")).to_be_hidden()
    select_all.check()
    boxes = page.locator('#bulk-form input[name="ids"]')
    n = boxes.count()
    assert n > 1
    expect(page.locator("#bulk-bar [data-selected-count]")).to_have_text(f"{n} selected")
    boxes.first.uncheck()
    expect(page.locator("#bulk-bar [data-selected-count]")).to_have_text(f"{n - 1} selected")
    assert select_all.evaluate("el => el.indeterminate") is True
    page.get_by_role("button", name=f"Exclude {n - 1} records").click()
    expect(page.get_by_role("heading", name=f"Exclude {n - 1} records")).to_be_visible()
