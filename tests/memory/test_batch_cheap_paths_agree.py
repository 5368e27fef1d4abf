"""The cheaper paths of a batch's Python work give what the plain ones gave: audit snapshots' values without the
JSON round trip (`audit._plain_copy`, `audit._datetime_text`), and the garbage collector paused while a batch
runs and resumed after (`batch._CollectorPause`)."""

from __future__ import annotations

import enum
import gc
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from memory_admin.memory import audit, batch
from memory_admin.memory.batch import assert_facts
from memory_admin.memory.models import MemoryRecord
from tests.support import at, deadline


def round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def same(got: Any, expected: Any) -> bool:
    """Equal, of the same types all the way down, NaN equal to NaN and -0.0 told from 0.0."""
    if type(got) is not type(expected):
        return False
    if type(got) is dict:
        return list(got) == list(expected) and all(same(got[k], expected[k]) for k in got)
    if type(got) is list:
        return len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected, strict=True))
    if type(got) is float:
        return (math.isnan(got) and math.isnan(expected)) or (got == expected and repr(got) == repr(expected))
    return bool(got == expected)


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


PLAIN = [
    {"v": "second", "i": 12},
    {"a": [1, 2.5, -0.0, None, True, False, "x"], "b": {"c": {"d": []}}, "e": {}},
    ["é", "\u2603", 'quote"back\\slash', "\n", 10**17, -(10**17), 1e300, float("inf"), float("-inf"), float("nan")],
    [],
    {},
]

NOT_PLAIN = [
    {"when": datetime(2026, 10, 1, 9, 0, 0, 123456, tzinfo=UTC)},  # a datetime inside: the encoder's text
    {"t": (1, 2)},  # a tuple: a list
    {1: "a", None: "b", 2.5: "c", False: "d"},  # keys that are not text: written as text
    {"c": Colour.RED, "l": Level.HIGH},  # subclasses of str and int: written as their base type
    [Decimal("1.10"), {"n": [Decimal("2")]}],
    {"deep": [[[{"x": [Colour.RED]}]]]},
    {"big": [10**30, -(10**30)]},  # large integers: left to the round trip
]


@pytest.mark.parametrize("value", PLAIN + NOT_PLAIN)
def test_a_snapshot_value_is_what_the_json_round_trip_gives(value: Any) -> None:
    got = audit._as_json(value)
    assert same(got, round_trip(value))


@pytest.mark.parametrize("value", PLAIN)
def test_a_plain_value_is_a_new_copy_not_the_record_s_own_object(value: Any) -> None:
    got = audit._plain_copy(value, audit._PLAIN_DEPTH)
    assert got is not audit._NOT_PLAIN and same(got, round_trip(value))
    assert got is not value
    if type(value) is dict and value:
        first = next(iter(value))
        if type(value[first]) in (dict, list):
            assert got[first] is not value[first]


@pytest.mark.parametrize("value", NOT_PLAIN)
def test_a_value_json_would_change_is_left_to_the_round_trip(value: Any) -> None:
    assert audit._plain_copy(value, audit._PLAIN_DEPTH) is audit._NOT_PLAIN


def test_a_value_nested_deeper_than_the_copy_follows_takes_the_round_trip() -> None:
    value: Any = "leaf"
    for n in range(audit._PLAIN_DEPTH + 5):
        value = {"k": value} if n % 2 else [value]
    assert audit._plain_copy(value, audit._PLAIN_DEPTH) is audit._NOT_PLAIN
    assert same(audit._as_json(value), round_trip(value))


def test_a_value_that_holds_itself_is_refused_as_json_refuses_it() -> None:
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    with pytest.raises(ValueError, match="Circular reference"):
        audit._as_json(value)


def test_an_integer_past_the_digit_limit_is_refused_as_json_refuses_it() -> None:
    value = {"n": [10**5000]}
    with pytest.raises(ValueError) as expected:
        round_trip(value)
    with pytest.raises(ValueError) as got:
        audit._as_json(value)
    assert str(got.value) == str(expected.value)


MOMENTS = [
    datetime(2026, 10, 1, 9, 0, tzinfo=UTC),
    datetime(2026, 10, 1, 9, 0, 0, 123456, tzinfo=UTC),  # milliseconds kept, as the encoder keeps them
    datetime(2026, 10, 1, 9, 0, 0, 999, tzinfo=UTC),
    datetime(2026, 10, 1, 11, 0, tzinfo=timezone(timedelta(hours=2))),  # the same instant in another zone
    datetime(2026, 10, 1, 9, 0, tzinfo=timezone(timedelta(0))),  # UTC as another object: not remembered
    datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Paris")),  # ambiguous wall time, fold 0
    datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Paris")),  # and fold 1
    datetime(2026, 10, 1, 9, 0),  # naive
]


def test_a_datetime_s_text_is_the_encoder_s_every_time_in_every_zone() -> None:
    encoder = DjangoJSONEncoder()
    for _ in range(3):  # the second and third time from what is remembered
        for moment in MOMENTS:
            assert audit._datetime_text(moment) == encoder.default(moment), moment
    assert len({audit._datetime_text(m) for m in MOMENTS}) == len(MOMENTS) - 1  # the two UTC 9:00 share a text


def test_what_is_remembered_of_datetimes_stays_bounded_and_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "_UTC_TEXT", {})
    monkeypatch.setattr(audit, "_UTC_TEXT_SIZE", 10)
    encoder = DjangoJSONEncoder()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(35):
        moment = start + timedelta(minutes=n, microseconds=n * 1001)
        assert audit._datetime_text(moment) == encoder.default(moment)
        assert len(audit._UTC_TEXT) <= 10


@pytest.mark.django_db
def test_a_snapshot_of_a_superseded_head_is_what_the_json_round_trip_gives(agent):
    first = assert_facts(agent, [deadline("2026-10-01", "r1", at(10, 1))], now=at(10, 1, 9, 1)).items[0].result
    second = assert_facts(agent, [deadline("2026-10-02", "r2", at(10, 2), expected_revision=1)], now=at(10, 2, 9, 1))
    assert first is not None and second.items[0].result is not None
    head = MemoryRecord.objects.get(pk=first.record.pk)
    got = audit.snapshot(head)
    data = {name: getattr(head, name) for name in audit._SNAPSHOT_FIELDS}
    assert {k: v for k, v in got.items() if k != "superseded_by"} == round_trip(data)
    assert got["superseded_by"] == second.items[0].result.record.memory_id
    assert got["status"] == "superseded" and type(got["status"]) is str


# --- The collector's pause -------------------------------------------------------------------------


@pytest.fixture
def collector_running() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_the_collector_is_paused_while_a_batch_runs_and_resumed_after(collector_running):
    pause = batch._CollectorPause()
    with pause():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), pause():
        raise RuntimeError("a batch failed")
    assert gc.isenabled()


def test_a_collector_paused_by_someone_else_stays_paused(collector_running):
    pause = batch._CollectorPause()
    gc.disable()
    with pause():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_batches_resume_the_collector_when_the_last_ends(collector_running):
    pause = batch._CollectorPause()
    first, second = pause(), pause()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first batch (another thread) ends while the second runs
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


@pytest.mark.django_db
def test_assert_facts_runs_with_the_collector_paused(agent, collector_running, monkeypatch):
    seen = []
    checked = batch._checked

    def spy(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return checked(*args)

    monkeypatch.setattr(batch, "_checked", spy)
    result = assert_facts(agent, [deadline("2026-10-01", "r1", at(10, 1))], now=at(10, 1, 9, 1))
    assert result.counts() == {"created": 1} and seen == [False] and gc.isenabled()
