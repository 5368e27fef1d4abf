"""The overview reads without a footnote (issue 34, item 10): tiles that say what they count, laid out so that no
row is left with one tile, a freshness card with a stacked bar and a breakdown, and relative times in one wording
("37 days ago", wording.relative) wherever they show."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO
from itertools import pairwise

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.dashboard import wording
from memory_admin.dashboard.pages.overview import BAR_WIDTH, tile_columns
from memory_admin.memory.models import MemoryRecord
from tests.support.ux_checks import assert_reads_as_people, visible_text


@pytest.fixture
def story(db: None) -> Client:
    call_command("seed_demo", "--subjects", "0", stdout=StringIO())
    client = Client()
    client.force_login(Principal.objects.get(username="owner@demo"))
    return client


def test_relative_times_count_days_up_to_a_year() -> None:
    now = timezone.now()
    assert wording.relative(now - timedelta(days=37, hours=5), now) == "37 days ago"
    assert wording.relative(now - timedelta(days=1, hours=1), now) == "1 day ago"
    assert wording.relative(now - timedelta(days=400), now) == "1 year ago"
    assert wording.relative(now + timedelta(days=3, minutes=1), now) == "in 3 days"


def test_the_tiles_say_what_they_count_without_a_footnote(story: Client) -> None:
    response = story.get("/")
    page = response.content.decode()
    assert "counts-explained" not in page and "Counts are of records" not in page
    labels = {tile.badge or tile.label.split(":")[0]: tile for tile in response.context["tiles"]}
    assert labels["accepted"].label == "current values agents get"
    assert labels["accepted"].n == MemoryRecord.objects.filter(status="accepted").count()
    assert labels["disputed"].label == "records, one per source, in 1 open dispute"
    assert labels["open dispute"].n == 1
    assert labels["deleted"].label == "records under a deletion tombstone, hidden or purged"
    overdue = next(t for t in response.context["tiles"] if t.label.startswith("overdue recheck"))
    assert "past their own recheck time (unverified, not wrong)" in overdue.label
    assert_reads_as_people(page, page="/")


def test_the_tile_columns_never_leave_a_lone_tile() -> None:
    assert tile_columns(8) == 4
    assert tile_columns(9) == 3
    assert tile_columns(6) == 3
    for count in range(2, 20):
        columns = tile_columns(count)
        assert count % columns != 1, f"{count} tiles in {columns} columns leave one alone"


def test_the_tile_grid_class_matches_the_tile_count(story: Client) -> None:
    response = story.get("/")
    columns = tile_columns(len(response.context["tiles"]))
    assert f'class="tiles tiles-{columns}"' in response.content.decode()


def test_the_freshness_card_breaks_the_current_values_down_on_one_bar(story: Client) -> None:
    response = story.get("/")
    bands = response.context["bands"]
    accepted = MemoryRecord.objects.filter(status="accepted").count()
    assert sum(b.n for b in bands) == accepted == response.context["accepted"]
    # The segments run end to end over the whole bar.
    assert bands[0].x == 0
    for before, after in pairwise(bands):
        assert after.x == before.x + before.width
    assert bands[-1].x + bands[-1].width == BAR_WIDTH
    page = response.content.decode()
    for band in bands:
        assert f'<a href="{band.href.replace("&", "&amp;")}">{band.label}</a>' in page
    fresh = bands[0].n + bands[1].n
    assert f"<strong>{round(100 * fresh / accepted)}%</strong> of {accepted} current values" in page


def test_inbox_and_recent_changes_use_the_one_relative_wording(story: Client) -> None:
    text = " ".join(visible_text(story.get("/").content.decode()))
    assert re.search(r"was due \d+ days? ago", text), "an overdue recheck says when it was due, in days"
    assert re.search(r"opened \d+ (days?|hours?|minutes?) ago|opened just now", text)
    assert "since " not in text.replace("since it", "")
