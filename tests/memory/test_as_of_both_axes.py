"""As-of reads on both time axes: valid time (what held) and record time (what we believed)."""

from __future__ import annotations

from memory_admin.memory import reads
from memory_admin.memory.actions import expire_record
from tests.support import DEADLINE, at


def value_as_of(principal, **when):
    record = reads.as_of(principal, **DEADLINE, **when)
    return record.value if record else None


def test_today_the_deadline_is_nov_2(agent, moved_deadline):
    assert value_as_of(agent) == "2026-11-02T17:00+09:00"


def test_what_was_the_deadline_on_oct_21(agent, moved_deadline):
    assert value_as_of(agent, valid_at=at(10, 21, 12)) == "2026-10-30T17:00+09:00"


def test_what_did_we_believe_on_oct_21(agent, moved_deadline):
    assert value_as_of(agent, known_at=at(10, 21, 12)) == "2026-10-30T17:00+09:00"


def test_on_oct_21_we_believed_oct_30_would_still_hold_on_oct_25(agent, moved_deadline):
    assert value_as_of(agent, valid_at=at(10, 25), known_at=at(10, 21, 12)) == "2026-10-30T17:00+09:00"


def test_after_the_change_oct_25_answers_nov_2(agent, moved_deadline):
    assert value_as_of(agent, valid_at=at(10, 25), known_at=at(10, 23)) == "2026-11-02T17:00+09:00"


def test_before_anything_was_recorded_there_is_no_answer(agent, moved_deadline):
    assert value_as_of(agent, known_at=at(10, 19)) is None
    assert value_as_of(agent, valid_at=at(10, 19)) is None


def test_the_api_answers_as_of_on_both_axes(api, agent, moved_deadline):
    client = api(agent)
    on_21 = client.get("/api/v1/facts/current/", {**DEADLINE, "valid_at": at(10, 21).isoformat()}).json()
    believed_21 = client.get("/api/v1/facts/current/", {**DEADLINE, "known_at": at(10, 21).isoformat()}).json()
    assert on_21["value"] == "2026-10-30T17:00+09:00" and on_21["status"] == "superseded"
    assert believed_21["value"] == "2026-10-30T17:00+09:00"
    listed = client.get("/api/v1/records/", {**DEADLINE, "valid_at": at(10, 21).isoformat()}).json()["results"]
    assert [r["value"] for r in listed] == ["2026-10-30T17:00+09:00"]


def test_an_expired_value_no_longer_answers_but_did_before_it_expired(agent, owner, moved_deadline):
    current = moved_deadline[1].record
    expire_record(owner, current.memory_id, "Task cancelled", now=at(10, 28))
    assert value_as_of(agent, valid_at=at(10, 29), known_at=at(10, 29)) is None
    assert value_as_of(agent, valid_at=at(10, 27), known_at=at(10, 29)) == "2026-11-02T17:00+09:00"
    # On Oct 27 we did not yet know it would end on Oct 28.
    assert value_as_of(agent, valid_at=at(10, 30), known_at=at(10, 27)) == "2026-11-02T17:00+09:00"
