"""The fact page (issue 34, items 4, 7 and 8): one revision numbering people read ("version 2 of 3") in the
chart and the history list, the source's revision as a detail; the as-of control in the app's date format
(typed, or from a quick pick), read by the one parser in dashboard/forms.py, with a message on bad input; the
previous and next fact of the project as links. Django's test client on the demo story, both backends."""

from __future__ import annotations

import html as html_lib
import re
from datetime import UTC, datetime
from io import StringIO
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.test import Client

from memory_admin.accounts.models import Principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.dashboard.forms import MOMENT_MESSAGE, parse_moment
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import at
from tests.support.ux_checks import assert_reads_as_people, visible_text

DEADLINE = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"
TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.fixture
def demo_story(db: None) -> None:
    """The demo's story without synthetic volume: the deadline told on Oct 20 (source r17, version 1), moved on
    Oct 22 (r18, version 2), and an older source revision imported late (r16, version 3)."""
    call_command("seed_demo", "--subjects", "0", stdout=StringIO())


def asking(**moments: str) -> str:
    return f"{DEADLINE}&{urlencode(moments)}"


def owner_client() -> Client:
    client = Client()
    client.force_login(Principal.objects.get(username="owner@demo"))
    return client


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def history_item(text: str, memory_id: str) -> str:
    found = re.search(rf'<li id="{memory_id}"[^>]*>(.*?)</li>', text, re.S)
    assert found, memory_id
    return found.group(1)


def chart_box(text: str, memory_id: str) -> str:
    found = re.search(rf'<g class="version[^"]*"[^>]*data-memory-id="{memory_id}">(.*?)</g>', text, re.S)
    assert found, memory_id
    return found.group(1)


def input_value(text: str, name: str) -> str:
    found = re.search(rf'<input type="text"[^>]*name="{name}" value="([^"]*)"', text)
    assert found, name
    return html_lib.unescape(found.group(1))


# --- One numbering ---------------------------------------------------------------------------------


def test_the_chart_and_the_history_number_versions_alike_with_the_source_revision_as_a_detail(demo_story):
    text = page(owner_client(), DEADLINE)
    for memory_id, number, source in (
        ("mem-deadline-001", 1, "r17"),
        ("mem-deadline-002", 2, "r18"),
        ("mem-deadline-late-import", 3, "r16"),
    ):
        assert MemoryRecord.objects.get(memory_id=memory_id).revision == number
        item = history_item(text, memory_id)
        assert f"Version {number} of 3" in item and f"source {source}" in item
        box = chart_box(text, memory_id)
        assert f'<tspan class="version-name">version {number} of 3</tspan>' in box
        assert f"source {source}" in box  # the box's hover title
    # The oldest source revision is never called "r3" (the product's count with the source's prefix).
    assert not re.search(r">\s*r\d+\b", text)
    # The late import says what it is on the chart itself: no legend paragraph needed.
    assert "imported late" in chart_box(text, "mem-deadline-late-import")
    assert "current answer" in chart_box(text, "mem-deadline-002")
    assert "dashed</span>" not in text
    # The current card and the as-of answer use the same words.
    current = re.search(r'<section class="card" id="current">(.*?)</section>', text, re.S)
    assert current and "Version 2 of 3 · source r18" in current.group(1)
    asked = page(owner_client(), DEADLINE + "&valid_at=21+Oct+2026+12:00")
    answer = re.search(r'<div id="asof".*?</div>', asked, re.S)
    assert answer and 'href="#mem-deadline-001">version 1 of 3</a>' in answer.group(0)


def test_record_ids_are_copyable_details_never_visible_text(demo_story):
    text = page(owner_client(), DEADLINE + "&valid_at=21+Oct+2026+12:00")
    assert_reads_as_people(text, page=DEADLINE)
    shown = [t for t in visible_text(text) if "mem-deadline" in t]
    assert shown == []
    # The history and the audit log keep each id in a copyable field.
    assert 'class="copy-id" readonly value="mem-deadline-late-import"' in history_item(text, "mem-deadline-late-import")
    audit = re.search(r'<details class="card section" id="audit">(.*?)</details>', text, re.S)
    assert audit and 'class="copy-id" readonly value="mem-deadline-002"' in audit.group(1)
    assert "version 2 of 3" in audit.group(1)


def test_the_sections_collapse_and_the_status_is_a_headline(demo_story):
    text = page(owner_client(), DEADLINE)
    for section in ("history", "rechecks", "derived", "propagation", "audit"):
        assert re.search(rf'<details class="card section" id="{section}"[ >]', text), section
    assert '<details class="card section" id="history" open>' in text
    assert '<details class="card section" id="audit">' in text  # closed until opened
    headline = re.search(r'<p class="headline" data-testid="fact-headline">(.*?)</p>', text, re.S)
    assert headline
    words = " ".join(visible_text(headline.group(1)))
    assert words.startswith("Current") and "checked" in words and "ago" in words
    assert '<script src="/static/js/fact-page.js" defer></script>' in text
    assert "{#" not in text and "{% comment" not in text  # the template's notes stay in the template


# --- The as-of control ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("Mon 2 Nov 2026", datetime(2026, 11, 2, tzinfo=TOKYO)),
        ("2 Nov 2026", datetime(2026, 11, 2, tzinfo=TOKYO)),
        ("Wed 21 Oct 2026, 12:00", datetime(2026, 10, 21, 12, tzinfo=TOKYO)),
        ("21 October 2026 12:00 JST", datetime(2026, 10, 21, 12, tzinfo=TOKYO)),
        ("21 oct. 2026 03:00 UTC", datetime(2026, 10, 21, 3, tzinfo=UTC)),
        ("2026-10-21", datetime(2026, 10, 21, tzinfo=TOKYO)),
        ("2026-10-21T12:00", datetime(2026, 10, 21, 12, tzinfo=TOKYO)),
        ("2026-10-21T03:00Z", datetime(2026, 10, 21, 3, tzinfo=UTC)),
    ],
)
def test_the_parser_reads_the_apps_format_and_iso(typed, expected):
    assert parse_moment(typed, TOKYO) == expected


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("the-day-after-tomorrow", MOMENT_MESSAGE),
        ("10/21/2026", MOMENT_MESSAGE),
        ("31 Feb 2026", "31 Feb 2026 is not a date on the calendar."),
        ("2 Foo 2026", "“Foo” is not a month"),
        ("Tue 2 Nov 2026", "2 Nov 2026 is a Monday, not a Tuesday"),
        ("2 Nov 2026 24:30", "24:30 is not a time of day"),
        ("2 Nov 2026 17:00 CET", "Times here are in JST"),
        ("2 Nov 0999", "from the year 1000 up to the year 8999"),
        ("99999-01-01", MOMENT_MESSAGE),
    ],
)
def test_the_parser_says_what_is_wrong(typed, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_moment(typed, TOKYO)


def test_a_date_typed_in_the_apps_format_answers_and_is_shown_back_in_it(demo_story):
    client = owner_client()
    for typed in ("Wed 21 Oct 2026, 12:00", "21 Oct 2026 12:00", "2026-10-21T12:00"):
        response = client.get(asking(valid_at=typed))
        assert response.status_code == 200
        assert response.context["as_of_record"].memory_id == "mem-deadline-001"
        assert input_value(response.content.decode(), "valid_at") == "Wed 21 Oct 2026, 12:00"
    # A record time too: what did we believe on 23 Oct (the move on 22 Oct was known by then).
    believed = client.get(asking(known_at="23 Oct 2026"))
    assert believed.context["as_of_record"].memory_id == "mem-deadline-002"
    assert input_value(believed.content.decode(), "known_at") == "Fri 23 Oct 2026"


def test_the_quick_picks_are_links_the_control_reads_back(demo_story):
    client = owner_client()
    text = page(client, DEADLINE)
    picks = re.findall(r'<li><a href="([^"]+)"[^>]*>([^<]+)</a></li>', text.split('data-testid="quick-picks"')[1])
    labels = [label for _, label in picks]
    assert labels[:2] == ["Yesterday", "A week ago"]
    assert labels[2:] == [f"Version {n} of 3 took effect" for n in (3, 2, 1)]
    answered = {}
    for href, label in picks:
        response = client.get(html_lib.unescape(href))
        assert response.status_code == 200, label
        assert not response.context["as_of_form"].errors, label
        shown = input_value(response.content.decode(), "valid_at")
        assert shown and shown in html_lib.unescape(href).replace("+", " ").replace("%2C", ",").replace("%3A", ":")
        assert 'aria-current="true"' in response.content.decode().split('data-testid="quick-picks"')[1]
        record = response.context["as_of_record"]
        answered[label] = record.memory_id if record else None
    # Each version's date answers with that version, where it answered as the current value.
    assert answered["Version 1 of 3 took effect"] == "mem-deadline-001"
    assert answered["Version 2 of 3 took effect"] == "mem-deadline-002"


@pytest.mark.parametrize(
    "typed",
    ["the-day-after-tomorrow", "10/21/2026", "31 Feb 2026", "Tue 2 Nov 2026", "2 Nov 2026 17:00 CET", "x" * 500],
)
def test_bad_as_of_input_gets_a_message_in_the_page_never_a_500(demo_story, typed):
    client = owner_client()
    for headers in ({}, {"HX-Request": "true"}):  # the whole page, and the htmx answer the Ask button swaps in
        response = client.get(asking(valid_at=typed), headers=headers)
        assert response.status_code == 200
        text = response.content.decode()
        assert 'data-testid="asof-error">Valid at: ' in text
        assert response.context["as_of_record"] is None
        assert_reads_as_people(text, page=f"as of {typed[:20]}")
    full = client.get(asking(valid_at=typed)).content.decode()
    assert input_value(full, "valid_at") == typed  # what was typed stays, to be corrected
    assert 'aria-invalid="true"' in full


# --- Between facts ----------------------------------------------------------------------------------


def links(text: str) -> dict[str, str]:
    return {rel: html_lib.unescape(href) for rel, href in re.findall(r'<a rel="(prev|next)" href="([^"]+)"', text)}


def test_previous_and_next_walk_every_fact_of_the_project_once(demo_story):
    client = owner_client()
    heads = MemoryRecord.objects.filter(project__key="project-a", is_head=True)
    expected = {(r.subject_id, r.predicate) for r in heads}
    # From the deadline back to the first fact, then forward through all of them.
    url = DEADLINE
    for _ in range(len(expected)):
        back = links(page(client, url)).get("prev")
        if back is None:
            break
        url = back
    first = page(client, url)
    assert "First fact of project-a" in first
    seen = []
    while True:
        text = page(client, url)
        context = client.get(url).context
        seen.append((context["subject"], context["predicate"]))
        forward = links(text).get("next")
        if forward is None:
            assert "Last fact of project-a" in text
            break
        assert links(page(client, forward))["prev"] == url  # next, then previous, comes back
        url = forward
        assert len(seen) <= len(expected)
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected


def test_another_tenants_facts_are_never_a_neighbour(demo_story, outsider):
    with tenant_context(outsider.tenant_id):  # written as the other tenant (row-level security on PostgreSQL)
        assert_fact(
            outsider,
            Assertion(
                project_id="project-a",
                subject_id="task-proposal-017",
                predicate="submission_deadlinf",  # right after the demo's deadline in the order of facts
                value="theirs",
                valid_from=at(10, 20),
                source_canonical_ref="x:1",
                source_revision="1",
            ),
        )
    nearby = links(page(owner_client(), DEADLINE))
    assert nearby and all("submission_deadlinf" not in href for href in nearby.values())
