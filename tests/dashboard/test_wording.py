"""Saying things in people's words (dashboard/wording.py and the template filters built on it)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from memory_admin.dashboard import wording

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_a_datetime_reads_as_a_day_date_time_and_zone_in_the_tenants_zone() -> None:
    moment = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
    assert wording.people_datetime(moment, TOKYO) == "Mon 2 Nov 2026, 17:00 JST"
    assert wording.people_datetime(moment, UTC) == "Mon 2 Nov 2026, 08:00 UTC"


def test_iso_strings_are_read_as_dates_and_other_text_stays_text() -> None:
    assert wording.parse_iso("2026-11-02T17:00:00+09:00") == datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
    assert wording.parse_iso("2026-11-02") == date(2026, 11, 2)
    assert wording.parse_iso("2026-11-02T17:00", TOKYO) == datetime(2026, 11, 2, 17, 0, tzinfo=TOKYO)
    assert wording.parse_iso("Room 4B") is None
    assert wording.parse_iso("2026-13-40") is None
    assert wording.parse_iso("20261102") is None


@pytest.mark.parametrize(
    ("span", "words"),
    [
        (timedelta(days=1), "1 day"),
        (timedelta(days=2, hours=3), "2 days 3 hours"),
        (timedelta(days=1, minutes=4), "1 day"),
        (timedelta(minutes=90), "1 hour 30 minutes"),
        (timedelta(seconds=45), "45 seconds"),
        (timedelta(0), "0 seconds"),
        (timedelta(days=400), "1 year 35 days"),
        (None, "—"),
        (3600, "1 hour"),
    ],
)
def test_durations_are_words_never_clock_or_iso_text(span: timedelta | int | None, words: str) -> None:
    assert wording.duration(span) == words
    assert ":" not in wording.duration(span) and "P" not in wording.duration(span)


def test_relative_times_say_how_long_ago_or_until() -> None:
    assert wording.relative(NOW - timedelta(days=3, hours=2), NOW) == "3 days ago"
    assert wording.relative(NOW + timedelta(hours=5, minutes=1), NOW) == "in 5 hours"
    assert wording.relative(NOW - timedelta(seconds=20), NOW) == "just now"
    assert wording.relative(NOW - timedelta(minutes=1), NOW) == "1 minute ago"


def test_overdue_and_days_left_count_against_the_due_date() -> None:
    assert wording.overdue(NOW - timedelta(days=39, hours=1), NOW) == "39 days overdue"
    assert wording.overdue(NOW + timedelta(days=3, hours=1), NOW) == "due in 3 days"
    assert wording.days_left(NOW + timedelta(days=12, hours=2), NOW) == "12 days left"
    assert wording.days_left(NOW + timedelta(hours=2), NOW) == "due today"
    assert wording.days_left(NOW - timedelta(days=3, hours=2), NOW) == "3 days late"


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (1200, "number", "1,200"),
        (1234567.5, "number", "1,234,567.5"),
        (50000.0, "number", "50,000"),
        (True, "flag", "yes"),
        (None, "empty", "none"),
        ("Room 4B", "text", "Room 4B"),
        ({"amount": 1200, "currency": "JPY"}, "money", "¥1,200"),
        ({"amount": 9.5, "currency": "CHF"}, "money", "9.5 CHF"),
        ({"value": 3, "unit": "kg"}, "money", "3 kg"),
        ({"samples": 3, "source": "crm"}, "pairs", "Samples: 3; Source: crm"),
        (["mem-1", "mem-2"], "items", "mem-1, mem-2"),
        ("2026-11-02", "date", "Mon 2 Nov 2026"),
        ("2026-11-02T17:00:00+09:00", "datetime", "Mon 2 Nov 2026, 17:00 JST"),
    ],
)
def test_values_are_shown_by_type(value: object, kind: str, text: str) -> None:
    shown = wording.show(value, TOKYO)
    assert (shown.kind, shown.text) == (kind, text)


def test_a_list_of_mappings_is_a_table_with_labelled_columns() -> None:
    shown = wording.show([{"store_id": "a", "count": 1000}, {"store_id": "b", "extra": True}], TOKYO)
    assert shown.kind == "rows"
    assert shown.columns == ["Store id", "Count", "Extra"]
    assert [[c.text for c in row] for row in shown.rows] == [["a", "1,000", "none"], ["b", "none", "yes"]]


def test_plain_text_is_cut_with_an_ellipsis() -> None:
    assert wording.plain("abcdefghij", limit=5) == "abcd…"
    assert wording.plain("abc", limit=5) == "abc"


def test_a_stale_value_caveat_has_labelled_parts() -> None:
    parts = wording.caveat_parts(
        freshness="recheck_due",
        last_verified_at=NOW - timedelta(days=40),
        last_verified_value={"amount": 1200, "currency": "JPY"},
        recheck_after=NOW - timedelta(days=39, hours=1),
        manual=True,
        now=NOW,
    )
    assert [p.label for p in parts] == ["Last verified value", "Could not be confirmed now", "Recheck due"]
    assert parts[1].text == "awaiting manual verification"
    assert parts[2].text == "39 days overdue"


def test_a_failed_recheck_says_why_and_a_fresh_value_has_no_caveat() -> None:
    parts = wording.caveat_parts(
        freshness="recheck_due",
        last_verified_at=None,
        source="crm:x",
        attempt_outcome="source_unavailable",
        attempt_at=NOW,
        attempt_error="timed out.",
        now=NOW,
    )
    assert [p.label for p in parts] == ["Never verified", "Could not be confirmed"]
    assert parts[1].text == "the canonical source could not be reached (timed out)"
    assert wording.caveat_parts(freshness="fresh", now=NOW) == []


def render(source: str, **context: object) -> str:
    return Template("{% load dashboard %}" + source).render(Context(context))


def test_the_filters_render_dates_with_iso_on_hover_in_the_active_zone() -> None:
    with timezone.override(TOKYO):
        html = render("{{ m|when }}", m=datetime(2026, 11, 2, 8, 0, tzinfo=UTC))
        assert html == (
            '<time datetime="2026-11-02T08:00:00+00:00" title="2026-11-02T08:00:00+00:00">'
            "Mon 2 Nov 2026, 17:00 JST</time>"
        )
        assert "Mon 2 Nov 2026, 17:00 JST" in render("{{ v|show_value }}", v="2026-11-02T17:00:00+09:00")
        assert render("{{ d|duration }}", d=timedelta(days=1)) == "1 day"


def test_show_value_draws_a_mapping_as_a_table_and_never_as_json() -> None:
    html = render("{{ v|show_value }}", v={"samples": [1, 2], "note": "<b>x</b>"})
    assert '<table class="value-table">' in html and '<th scope="row">Samples</th>' in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "{" not in html and "[" not in html and "'" not in html


def test_show_value_with_a_limit_is_one_line_cut_with_the_whole_value_on_hover() -> None:
    html = render("{{ v|show_value:12 }}", v={"samples": 3, "source": "crm"})
    assert html == '<span title="Samples: 3; Source: crm">Samples: 3;…</span>'
    assert render("{{ v|show_value:12 }}", v=1200) == '<span class="number">1,200</span>'
