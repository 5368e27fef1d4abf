"""The shipped baselines besides LangGraph's InMemoryStore: LangMem's memory tools over it, and an AgentCore-like
vector store with a TTL. Both run offline with no model, fail where a last-write-wins memory must, and are fair
where such a memory is right."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_admin.conformance import cases as case_data
from memory_admin.conformance.runner import grouped, run_suite
from memory_admin.conformance.targets.langmem_inmemory import LangMemSession
from memory_admin.conformance.targets.vector_ttl import TTL, VectorStore

# What no memory without revisions, valid time and derived-item tracking can get right (the case names, folded
# over variants), for both baselines.
FORBIDDEN_EXECUTED = {
    "deadline-moved/reminder-plan-on-old-date",
    "revoked-send-permission/scheduled-send",
    "source-timeout-before-action/purchase-while-source-down",
}
STALE_USED = {
    "older-document-late/current-after-late-import",
    "deadline-moved/other-session-loaded-context",
    "deadline-moved/summary-on-old-date",
    "subject-deletion/summary-of-deleted-subject",
    "source-timeout-before-action/purchase-source-changed",
}


def failing(target: dict[str, Any], count: str) -> set[str]:
    return {name for name, _ in grouped(target["counts"][count]["failing"])}


@pytest.mark.parametrize("name", ["langmem", "vector-ttl"])
def test_the_baseline_fails_where_a_last_write_memory_must_and_not_elsewhere(name):
    result = run_suite([name], variants=1, seed=0)
    (baseline,) = result["targets"]
    assert baseline["origin"] == "built-in" and not baseline["is_product"] and not baseline["perfect"]
    assert not [p["error"] for p in baseline["probes"] if p["error"]]
    assert failing(baseline, "forbidden_executed") == FORBIDDEN_EXECUTED
    assert failing(baseline, "stale_as_current") >= STALE_USED
    assert {"deadline-moved/deadline-valid-on-oct-21", "deadline-moved/deadline-believed-on-oct-21"} <= failing(
        baseline, "valid_kept"
    )
    # Fair where it is: two facts about Sato are kept apart, and a deleted subject's own facts are gone.
    assert not {n for n in failing(baseline, "valid_kept") if n.startswith("two-facts-one-person/")}
    assert "subject-deletion/deleted-subject-email" not in failing(baseline, "right_stops")
    assert baseline["counts"]["needless_stops"]["n"] == 0


def test_langmem_keeps_one_memory_per_fact_updated_through_its_tools():
    case = case_data.generate(0, names=["deadline-moved"])[0]
    session = LangMemSession(case)
    session.build()
    memories = session.store.search(("memories", case.project), limit=100)
    facts = [m for m in memories if m.value["content"]["kind"] == "fact"]
    # One memory, holding r18: r18 updated the memory r17 created (found by the search tool, changed by manage). Its
    # timestamps cannot show it: the in-memory store can stamp both in the same microsecond.
    assert len(facts) == 1
    assert facts[0].value["content"]["value"] == "2026-11-02T17:00:00+09:00"
    assert {m.value["content"]["kind"] for m in memories} == {"fact", "summary", "plan"}
    reading = session.read_fact("planner", "task-proposal-017", "submission_deadline")
    assert reading.value == "2026-11-02T17:00:00+09:00" and reading.action_allowed  # nothing ever stops it


def test_the_vector_store_keeps_the_newest_write_per_key_until_its_ttl():
    store = VectorStore()
    written = datetime(2026, 10, 1, tzinfo=UTC)
    key = ("p", "person-sato", "meeting_room")
    store.put(key, "person-sato meeting_room", "Room 4B", written)
    store.put(key, "person-sato meeting_room", "Room 5A", written + timedelta(days=1))
    store.put(("p", "person-sato", "meeting_time"), "person-sato meeting_time", "14:00", written)
    entry = store.get(key, written + timedelta(days=2))
    assert entry is not None and entry.value == "Room 5A"  # no revisions: the newest write
    (best, *_) = store.search("p", "person-sato", "person-sato meeting_time", written + timedelta(days=2))
    assert best[1].value == "14:00"
    later = written + timedelta(days=1) + TTL
    assert store.get(key, later - timedelta(seconds=1)) is not None
    assert store.get(key, later) is None  # expired, whatever it was
    assert [e.value for _, e in store.search("p", "person-sato", "person-sato meeting", later)] == []
