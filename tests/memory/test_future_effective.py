"""A rule effective tomorrow (the seed's case 3): today's value stays the answer until the hand-over.

The demo's `expense-policy · approval_limit` is 50000 today and 100000 from tomorrow. Asserting the
successor ahead of time must not make today's value unusable anywhere — search, the retrieval preview,
cached answers, loaded contexts, summaries — and everything must flip when the successor's `valid_from`
passes: at query time for reads (the database decides), and by the valid-time transition task for the
index's stored flag, notices and cache evictions.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from memory_admin.derived import lineage, search
from memory_admin.derived.caches import answer_ttl, fact_key
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import CacheEntry, Invalidation, Propagation, Summary
from memory_admin.derived.tasks import CAME_INTO_EFFECT, mark_records_in_effect, refresh_record_vectors
from memory_admin.derived.vectors import get_index
from memory_admin.memory.actions import (
    Assertion,
    assert_fact,
    exclude_record,
    expire_record,
    settle_valid_time_transitions,
)
from memory_admin.memory.models import MemoryRecord
from tests.support import at, deadline

LIMIT = {"project_id": "project-a", "subject_id": "expense-policy", "predicate": "approval_limit"}
QUERY = {"project_id": "project-a", "q": "expense policy approval limit"}


def limit(value: int, revision: str, valid_from: datetime, expected_revision: int | None = None) -> Assertion:
    return Assertion(
        project_id="project-a",
        subject_id="expense-policy",
        predicate="approval_limit",
        value=value,
        valid_from=valid_from,
        source_canonical_ref="handbook:expenses",
        source_revision=revision,
        expected_revision=expected_revision,
    )


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def flags(tenant_id: int, *records: MemoryRecord) -> dict[str, bool]:
    """The index's stored `usable` flag of each record's entry."""
    entries = get_index().find(tenant_id=tenant_id, object_ids=[r.memory_id for r in records])
    return {e.object_id: e.usable for e in entries}


@pytest.fixture
def today(agent) -> MemoryRecord:
    """50000, in effect since April."""
    return assert_fact(agent, limit(50000, "2026.1", at(4, 1)), now=at(4, 1, 9)).record


def schedule_successor(agent, today: MemoryRecord, takes_effect: datetime, **kwargs) -> MemoryRecord:
    """100000, recorded now, in effect from `takes_effect`."""
    a = limit(100000, "2026.2", takes_effect, expected_revision=today.revision)
    return assert_fact(agent, a, **kwargs).record


@pytest.fixture
def tomorrow() -> datetime:
    return timezone.now() + timedelta(days=1)


@pytest.fixture
def successor(agent, today, tomorrow) -> MemoryRecord:
    return schedule_successor(agent, today, tomorrow)


def clock(monkeypatch, moment: datetime) -> None:
    """A fixed clock for every `timezone.now()` the code under test reads (the conformance suite's way)."""
    monkeypatch.setattr(timezone, "now", lambda: moment)


# --- today -----------------------------------------------------------------------------------------


def test_todays_value_is_still_the_current_belief_after_a_successor_is_scheduled(today, successor, tomorrow):
    today.refresh_from_db()
    now = timezone.now()
    assert today.status == "accepted" and today.valid_to == tomorrow and today.superseded_by_id == successor.pk
    assert not today.is_head  # the compare-and-swap target moved on; the belief did not
    assert today.is_current_at(now) and not successor.is_current_at(now)
    assert successor.is_current_at(tomorrow) and not today.is_current_at(tomorrow)


def test_search_answers_todays_value_and_holds_back_the_successor_as_not_yet_in_effect(api, agent, today, successor):
    refresh_record_vectors([today.memory_id, successor.memory_id])  # what the worker does after commit
    # The index says so too: today's entry is usable until the hand-over, the successor's is not yet.
    assert flags(agent.tenant_id, today, successor) == {today.memory_id: True, successor.memory_id: False}

    client = api(agent)
    hits = client.get("/api/v1/search/", QUERY).json()["results"]
    mine = {h["memory_id"]: h for h in hits}
    assert mine[today.memory_id]["usable"] is True and mine[today.memory_id]["value"] == 50000
    assert mine[today.memory_id]["reason_code"] is None
    assert successor.memory_id not in mine
    assert client.get("/api/v1/facts/current/", LIMIT).json()["value"] == 50000  # the same answer

    everything = {
        h["memory_id"]: h for h in client.get("/api/v1/search/", {**QUERY, "include": "all"}).json()["results"]
    }
    held = everything[successor.memory_id]
    assert held["usable"] is False and held["reason_code"] == "not_yet_in_effect"
    assert held["reason"].startswith("Not yet in effect")
    assert held["current_memory_id"] == today.memory_id and held["current_value"] == 50000


def test_the_retrieval_preview_lists_todays_value_as_usable(owner, agent, today, successor):
    refresh_record_vectors([today.memory_id, successor.memory_id])
    # The query of the report: any query that reaches the fact's entries shows the same.
    response = signed_in(owner).get("/retrieval/?q=proposal+017+submission+deadline&project=project-a")
    result = response.context["result"]
    assert today.memory_id in [h.record.memory_id for h in result.results]
    assert today.memory_id not in [h.record.memory_id for h in result.held_back]
    [held] = [h for h in result.held_back if h.record.memory_id == successor.memory_id]
    assert held.reason_code == "not_yet_in_effect" and held.current.memory_id == today.memory_id
    page = response.content.decode()
    assert "not yet in effect; takes effect" in page
    assert "Valid until" in page  # today's row says when its successor takes over


def test_every_held_back_row_says_why(owner, agent, today, successor):
    old_deadline = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))
    room = assert_fact(
        agent,
        Assertion(
            project_id="project-a",
            subject_id="sato",
            predicate="meeting_room",
            value="A-301",
            valid_from=at(10, 1),
            source_canonical_ref="rooms:sato",
            source_revision="1",
        ),
    ).record
    exclude_record(owner, room.memory_id, "A guess from a chat, not the booking system.")
    time = assert_fact(
        agent,
        Assertion(
            project_id="project-a",
            subject_id="sato",
            predicate="meeting_time",
            value="10:00",
            valid_from=at(10, 1),
            source_canonical_ref="cal:sato",
            source_revision="1",
        ),
    ).record
    expire_record(owner, time.memory_id, "The meeting series ended.")

    def price(value: int, ref: str) -> Assertion:
        return Assertion(
            project_id="project-a",
            subject_id="product-x",
            predicate="unit_price",
            value=value,
            valid_from=at(10, 26),
            source_canonical_ref=ref,
            source_revision="1",
        )

    vendor = assert_fact(agent, price(1200, "vendor:x"))
    assert_fact(agent, price(1350, "partner:x"))
    records = list(MemoryRecord.objects.filter(tenant_id=agent.tenant_id))
    refresh_record_vectors([r.memory_id for r in records])

    result = search.search(agent, project_id="project-a", q="deadline room time price limit", k=25)
    held = {h.record.memory_id: h for h in result.held_back}
    assert all(h.reason for h in result.held_back)
    assert held[old_deadline.memory_id].reason_code == "superseded"
    assert (held[old_deadline.memory_id].reason or "").startswith("Superseded by ")
    assert held[room.memory_id].reason == "Excluded: A guess from a chat, not the booking system."
    assert held[time.memory_id].reason_code == "expired"
    assert held[vendor.record.memory_id].reason_code == "disputed"
    assert held[successor.memory_id].reason_code == "not_yet_in_effect"
    assert today.memory_id in {h.record.memory_id for h in result.results}


def test_a_deleted_memorys_index_entry_is_dropped_without_showing_it(owner, agent, today):
    refresh_record_vectors([today.memory_id])
    # Stage 2 hid the record; the index entry is not purged yet.
    MemoryRecord.all_objects.filter(pk=today.pk).update(tombstoned_at=timezone.now(), status="deleted", is_head=False)
    result = search.search(agent, project_id="project-a", q="expense policy approval limit", k=10)
    shown = {h.record.memory_id for h in result.results + result.held_back}
    assert today.memory_id not in shown and result.dropped >= 1
    page = signed_in(owner).get("/retrieval/?q=expense+policy+approval+limit&project=project-a").content.decode()
    assert today.memory_id not in page and "50000" not in page and "dropped" in page


# --- cached answers ----------------------------------------------------------------------------------


def test_a_cached_answer_survives_a_scheduled_successor_and_is_evicted_at_the_hand_over(
    api, agent, today, tomorrow, monkeypatch, django_capture_on_commit_callbacks
):
    client = api(agent)
    assert client.get("/api/v1/facts/current/", LIMIT).json()["value"] == 50000  # fills the answer cache
    key = fact_key(agent.tenant_id, **LIMIT)
    with django_capture_on_commit_callbacks(execute=True):
        successor = schedule_successor(agent, today, tomorrow)
    # Today's answer is still right: nothing evicted it, and it is served from the cache.
    assert cache.get(key)["value"]["value"] == 50000
    assert CacheEntry.objects.get(key=key).evicted_at is None
    assert not Propagation.objects.filter(record=today).exists()
    assert client.get("/api/v1/facts/current/", LIMIT).json()["value"] == 50000

    later = tomorrow + timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        settle_valid_time_transitions(now=later)
    assert cache.get(key) is None
    assert CacheEntry.objects.get(key=key).evicted_at == later
    assert Propagation.objects.filter(record=today, dependant_kind="cache", action="evicted").exists()
    clock(monkeypatch, later)
    answer = client.get("/api/v1/facts/current/", LIMIT).json()
    assert answer["value"] == 100000 and answer["memory_id"] == successor.memory_id


def test_an_answer_is_never_cached_past_the_end_of_its_validity(agent, today):
    soon = timezone.now() + timedelta(seconds=90)
    schedule_successor(agent, today, soon)
    today.refresh_from_db()
    assert 0 < answer_ttl(today) <= 90  # not FACT_CACHE_SECONDS: the successor takes over at `soon`


# --- loaded contexts and summaries ---------------------------------------------------------------------


def test_a_loaded_context_gets_no_notice_until_the_hand_over(agent, other_agent, today, tomorrow):
    base = [BaseRef(today.memory_id, today.revision)]
    expires = timezone.now() + timedelta(days=3)
    before = lineage.register_context_load(other_agent, session_id="before", bases=base, expires_at=expires)
    successor = schedule_successor(agent, today, tomorrow)
    # Loading today's value after the successor was scheduled is loading the current belief: no notice.
    after = lineage.register_context_load(other_agent, session_id="after", bases=base, expires_at=expires)
    assert not Invalidation.objects.filter(record=today).exists()
    # Building on it is still allowed (a summary on a base that is not current is 409).
    summary = lineage.create_summary(agent, project_id="project-a", text="Limit 50000", bases=base)

    settle_valid_time_transitions(now=tomorrow + timedelta(minutes=1))

    today.refresh_from_db()
    assert today.status == "superseded"
    notices = Invalidation.objects.filter(record=today)
    assert {n.load_id for n in notices} == {before.pk, after.pk}
    assert all(n.successor_id == successor.pk and n.acknowledged_at is None for n in notices)
    assert Summary.objects.get(pk=summary.pk).status == "stale"


def test_a_summary_on_todays_value_is_201_over_the_api(api, agent, today, successor):
    response = api(agent).post(
        "/api/v1/summaries/",
        {
            "project_id": "project-a",
            "text": "Approval limit 50000",
            "derived_from": [{"memory_id": today.memory_id, "revision": today.revision}],
        },
        format="json",
    )
    assert response.status_code == 201
    refused = api(agent).post(
        "/api/v1/summaries/",
        {
            "project_id": "project-a",
            "text": "Approval limit 100000",
            "derived_from": [{"memory_id": successor.memory_id, "revision": successor.revision}],
        },
        format="json",
    )
    assert refused.status_code == 409 and refused.json()["code"] == "base_not_current"


def test_a_stale_digest_is_regenerated_from_todays_value_not_the_scheduled_one(agent, today, successor):
    old_deadline = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    digest = lineage.create_summary(
        agent,
        project_id="project-a",
        text="old",
        kind="facts_digest",
        bases=[BaseRef(today.memory_id, today.revision), BaseRef(old_deadline.memory_id, 1)],
    )
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))
    fresh = lineage.regenerate_summary(Summary.objects.get(pk=digest.pk))
    assert fresh is not None  # the limit fact still has a current value: today's
    assert "approval_limit: 50000" in fresh.text and "100000" not in fresh.text


# --- the hand-over -------------------------------------------------------------------------------------


def test_search_flips_at_query_time_even_before_the_transition_task_runs(api, agent, today):
    """The successor was scheduled two days ago for yesterday; the transition task has not run since."""
    successor = schedule_successor(
        agent, today, timezone.now() - timedelta(days=1), now=timezone.now() - timedelta(days=2)
    )
    refresh_record_vectors([today.memory_id, successor.memory_id])
    index = get_index()
    # The stored flags as they were written two days ago, before the hand-over: stale on purpose.
    index.set_usable([f"record:{today.memory_id}"], True)
    index.set_usable([f"record:{successor.memory_id}"], False)

    client = api(agent)
    found = {h["memory_id"]: h for h in client.get("/api/v1/search/", QUERY).json()["results"]}
    assert successor.memory_id in found and found[successor.memory_id]["value"] == 100000
    assert today.memory_id not in found
    everything = {
        h["memory_id"]: h for h in client.get("/api/v1/search/", {**QUERY, "include": "all"}).json()["results"]
    }
    assert everything[today.memory_id]["reason_code"] == "superseded"
    assert everything[today.memory_id]["current_memory_id"] == successor.memory_id
    assert client.get("/api/v1/facts/current/", LIMIT).json()["value"] == 100000


def test_the_transition_task_flips_the_index_flags_at_the_hand_over(agent, today, successor, tomorrow, monkeypatch):
    refresh_record_vectors([today.memory_id, successor.memory_id])
    sent: list[tuple[str, list[str]]] = []

    def enqueue(task, items):  # what each module hands to the queue after commit
        sent.append((task.name, list(items)))

    for module in ("memory_admin.derived.propagation", "memory_admin.derived.tasks"):
        monkeypatch.setattr(f"{module}.enqueue_batched_after_commit", enqueue)
    assert mark_records_in_effect(timezone.now()) == []  # not yet

    later = tomorrow + timedelta(minutes=1)
    clock(monkeypatch, later)
    settle_valid_time_transitions()
    queued = {memory_id for name, batch in sent if name == refresh_record_vectors.name for memory_id in batch}
    assert {today.memory_id, successor.memory_id} <= queued
    marker = Propagation.objects.get(record=successor, dependant_kind="vector", action=CAME_INTO_EFFECT)
    assert marker.at == later
    assert mark_records_in_effect(later) == []  # once per record

    refresh_record_vectors(sorted(queued))  # what the worker does with the queued batches
    assert flags(agent.tenant_id, today, successor) == {today.memory_id: False, successor.memory_id: True}
    hits = search.search(agent, project_id="project-a", q="expense policy approval limit", k=10)
    assert [h.record.memory_id for h in hits.results if h.record.subject_id == "expense-policy"] == [
        successor.memory_id
    ]


def test_a_new_fact_asserted_ahead_of_time_becomes_usable_when_it_takes_effect(agent, tomorrow, monkeypatch):
    rule = assert_fact(
        agent,
        Assertion(
            project_id="project-a",
            subject_id="travel-policy",
            predicate="per_diem",
            value=8000,
            valid_from=tomorrow,
            source_canonical_ref="handbook:travel",
            source_revision="2026.2",
        ),
    ).record
    refresh_record_vectors([rule.memory_id])
    assert flags(agent.tenant_id, rule) == {rule.memory_id: False}
    held = search.search(agent, project_id="project-a", q="travel policy per diem", k=5).held_back
    assert [h.reason_code for h in held if h.record.pk == rule.pk] == ["not_yet_in_effect"]

    later = tomorrow + timedelta(seconds=1)
    assert mark_records_in_effect(later) == [rule.memory_id]
    clock(monkeypatch, later)
    refresh_record_vectors([rule.memory_id])
    assert flags(agent.tenant_id, rule) == {rule.memory_id: True}
    assert rule.memory_id in {
        h.record.memory_id
        for h in search.search(agent, project_id="project-a", q="travel policy per diem", k=5).results
    }
