"""Revisions are compared only where their valid times overlap (PRODUCT.md rule 3, issue 31).

Tomorrow's rule (r2, in effect from tomorrow) is recorded before today's rule (r1, in effect since last month)
of the same source. r1 arrives as an older revision, yet nothing newer covers today: r1 is today's answer until
tomorrow and r2 from then on. An older revision imported late stays history only where a newer one covers its
valid time (the seed's late import), and answers where nothing newer does. Both write paths (one assertion, a
batch) store the same thing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from memory_admin.derived import lineage
from memory_admin.derived.caches import answer_ttl, fact_key
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import CacheEntry, Invalidation, Summary
from memory_admin.derived.search import search
from memory_admin.memory import reads
from memory_admin.memory.actions import Assertion, Outcome, assert_fact, settle_valid_time_transitions
from memory_admin.memory.batch import assert_facts
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, body, deadline

LIMIT: dict[str, Any] = {"project_id": "project-a", "subject_id": "expense-policy", "predicate": "approval_limit"}


def limit(value: int, revision: str, valid_from: datetime, **kwargs: Any) -> Assertion:
    return Assertion(
        **LIMIT,
        value=value,
        valid_from=valid_from,
        source_canonical_ref="handbook:expenses",
        source_revision=revision,
        **kwargs,
    )


@pytest.fixture
def now() -> datetime:
    return timezone.now()


@pytest.fixture
def tomorrow(now) -> datetime:
    return now + timedelta(days=1)


@pytest.fixture
def last_month(now) -> datetime:
    return now - timedelta(days=30)


@pytest.fixture
def rules(agent, now, tomorrow, last_month) -> tuple[MemoryRecord, MemoryRecord]:
    """r2 (100000 from tomorrow) recorded two hours ago, then r1 (50000 since last month) an hour ago."""
    r2 = assert_fact(agent, limit(100000, "r2", tomorrow), now=now - timedelta(hours=2)).record
    r1 = assert_fact(agent, limit(50000, "r1", last_month), now=now - timedelta(hours=1)).record
    return r1, r2


def test_todays_rule_recorded_after_tomorrows_answers_today_with_200(api, agent, rules):
    r1, _ = rules
    answer = api(agent).get("/api/v1/facts/current/", LIMIT)
    assert answer.status_code == 200
    assert answer.json()["value"] == 50000 and answer.json()["memory_id"] == r1.memory_id


def test_from_tomorrow_the_newer_revision_answers(api, agent, rules, tomorrow):
    _, r2 = rules
    later = api(agent).get("/api/v1/facts/current/", {**LIMIT, "valid_at": (tomorrow + timedelta(hours=1)).isoformat()})
    assert later.status_code == 200
    assert later.json()["value"] == 100000 and later.json()["memory_id"] == r2.memory_id
    at_the_hand_over = reads.as_of(agent, **LIMIT, valid_at=tomorrow)
    assert at_the_hand_over is not None and at_the_hand_over.pk == r2.pk


def test_history_lists_both_revisions(api, agent, rules):
    r1, r2 = rules
    chain = api(agent).get(f"/api/v1/records/{r1.memory_id}/history/").json()
    listed = chain["results"] if isinstance(chain, dict) and "results" in chain else chain
    assert {r["memory_id"] for r in listed} == {r1.memory_id, r2.memory_id}


def test_before_todays_rule_arrived_nothing_answered_for_today(api, agent, rules, now):
    known_before = (now - timedelta(minutes=90)).isoformat()
    answer = api(agent).get("/api/v1/facts/current/", {**LIMIT, "known_at": known_before})
    assert answer.status_code == 404
    # What was believed then about tomorrow is r2, as now.
    assert reads.as_of(agent, **LIMIT, valid_at=now + timedelta(days=2), known_at=now - timedelta(minutes=90))


def test_the_late_revision_is_cut_where_the_newer_one_takes_over_and_the_head_stays(rules, tomorrow):
    r1, r2 = rules
    r1.refresh_from_db()
    r2.refresh_from_db()
    assert r1.status == "accepted" and r1.entered_current and not r1.is_head
    assert r1.valid_to == tomorrow and r1.asserted_valid_to is None  # as asserted: open-ended
    assert r1.valid_to_recorded_at == r1.recorded_from and r1.superseded_by_id == r2.pk
    assert r2.is_head and r2.status == "accepted" and r2.valid_from == tomorrow


def test_the_write_answers_201_accepted_through_the_api(api, agent, tomorrow, last_month):
    client = api(agent)
    assert client.post("/api/v1/records/", body(limit(100000, "r2", tomorrow)), format="json").status_code == 201
    response = client.post("/api/v1/records/", body(limit(50000, "r1", last_month)), format="json")
    assert response.status_code == 201
    data = response.json()
    assert data["status"] == "accepted" and data["outcome"] == "created"
    assert data["valid_to"] is not None  # cut where r2 takes over


def test_a_writer_compares_against_the_head_not_todays_answer(api, agent, rules, now):
    r1, r2 = rules
    change = body(limit(70000, "r3", now, expected_revision=r1.revision))
    refused = api(agent).post("/api/v1/records/", change, format="json")
    assert refused.status_code == 409
    assert refused.json()["code"] == "revision_conflict"
    change["expected_revision"] = r2.revision
    assert api(agent).post("/api/v1/records/", change, format="json").status_code == 201
    assert api(agent).get("/api/v1/facts/current/", LIMIT).json()["value"] == 70000


def test_at_the_hand_over_the_late_revision_becomes_history(agent, rules, tomorrow):
    r1, r2 = rules
    settle_valid_time_transitions(now=tomorrow + timedelta(minutes=1))
    r1.refresh_from_db()
    assert r1.status == "superseded" and r1.superseded_by_id == r2.pk
    current = reads.as_of(agent, **LIMIT, valid_at=tomorrow + timedelta(minutes=1))
    assert current is not None and current.pk == r2.pk


def test_a_cached_answer_on_the_late_revision_ends_at_the_hand_over(
    api, agent, rules, tomorrow, django_capture_on_commit_callbacks
):
    r1, _ = rules
    r1.refresh_from_db()
    assert 0 < answer_ttl(r1) <= 24 * 3600  # never served from the cache past the hand-over
    assert api(agent).get("/api/v1/facts/current/", LIMIT).json()["value"] == 50000  # fills the answer cache
    key = fact_key(agent.tenant_id, **LIMIT)
    assert CacheEntry.objects.get(key=key).evicted_at is None
    later = tomorrow + timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        settle_valid_time_transitions(now=later)
    assert CacheEntry.objects.get(key=key).evicted_at == later


def test_notices_reach_who_loaded_the_late_revision_at_the_hand_over_and_nobody_before(
    agent, other_agent, now, tomorrow, last_month
):
    r2 = assert_fact(agent, limit(100000, "r2", tomorrow), now=now - timedelta(hours=2)).record
    expires = now + timedelta(days=3)
    scheduled = lineage.register_context_load(
        other_agent, session_id="scheduled", bases=[BaseRef(r2.memory_id, r2.revision)], expires_at=expires
    )
    # (Loading a value not in effect yet is told at once; that is the load's own notice.)
    told = set(Invalidation.objects.filter(load=scheduled).values_list("pk", flat=True))
    r1 = assert_fact(agent, limit(50000, "r1", last_month), now=now - timedelta(hours=1)).record
    # Today's answer arriving changes nothing anyone holds: r2 is what it was, from tomorrow.
    assert set(Invalidation.objects.filter(load=scheduled).values_list("pk", flat=True)) == told
    base = [BaseRef(r1.memory_id, r1.revision)]
    today = lineage.register_context_load(other_agent, session_id="today", bases=base, expires_at=expires)
    summary = lineage.create_summary(agent, project_id="project-a", text="Limit 50000", bases=base)
    assert not Invalidation.objects.filter(record=r1).exists()

    settle_valid_time_transitions(now=tomorrow + timedelta(minutes=1))

    notices = Invalidation.objects.filter(record=r1)
    assert {n.load_id for n in notices} == {today.pk}
    assert all(n.successor_id == r2.pk and n.acknowledged_at is None for n in notices)
    assert Summary.objects.get(pk=summary.pk).status == "stale"
    assert set(Invalidation.objects.filter(load=scheduled).values_list("pk", flat=True)) == told


def test_search_finds_todays_rule_usable_and_tomorrows_not_yet_in_effect(agent, rules):
    r1, r2 = rules
    result = search(agent, project_id="project-a", q="expense policy approval limit", k=10)
    assert r1.memory_id in {h.record.memory_id for h in result.results}
    held = {h.record.memory_id: h for h in result.held_back}
    assert held[r2.memory_id].reason_code == "not_yet_in_effect"


def test_a_late_revision_whose_start_a_newer_one_covers_stays_history_only(api, agent, rules, last_month):
    r1, _ = rules
    response = api(agent).post(
        "/api/v1/records/", body(limit(40000, "r0", last_month + timedelta(days=1))), format="json"
    )
    assert response.status_code == 200 and response.json()["outcome"] == "history"
    assert api(agent).get("/api/v1/facts/current/", LIMIT).json()["memory_id"] == r1.memory_id


# --- the seed's late import: history where the newer covers, an answer where nothing newer does -----------


def test_the_seeds_late_import_answers_only_before_any_newer_revision(api, agent, moved_deadline):
    r17 = moved_deadline[0].record
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-10-28T17:00+09:00", "r16", at(10, 18))), format="json"
    )
    assert response.status_code == 200 and response.json()["outcome"] == "history"
    data = response.json()
    assert data["status"] == "superseded" and data["superseded_by"] == r17.memory_id
    client = api(agent)
    assert client.get("/api/v1/facts/current/", DEADLINE).json()["value"] == "2026-11-02T17:00+09:00"
    before_r17 = client.get("/api/v1/facts/current/", {**DEADLINE, "valid_at": at(10, 19).isoformat()}).json()
    assert before_r17["value"] == "2026-10-28T17:00+09:00"
    on_r17s_watch = client.get("/api/v1/facts/current/", {**DEADLINE, "valid_at": at(10, 21).isoformat()}).json()
    assert on_r17s_watch["value"] == "2026-10-30T17:00+09:00"


# --- both write paths store the same ------------------------------------------------------------------------


def _stored(tenant_id: int) -> list[tuple[Any, ...]]:
    records = MemoryRecord.objects.filter(tenant_id=tenant_id)
    revision = dict(records.values_list("pk", "revision"))
    named = dict(records.values_list("memory_id", "revision"))

    def reason(text: str) -> str:  # a record named by its revision, not its random id
        for memory_id, n in named.items():
            text = text.replace(memory_id, f"<revision {n}>")
        return text

    return [
        (
            r.subject_id,
            r.revision,
            r.value,
            r.status,
            r.valid_from,
            r.valid_to,
            r.asserted_valid_to,
            r.valid_to_recorded_at,
            r.recorded_to,
            r.entered_current,
            r.is_head,
            revision.get(r.superseded_by_id),
            reason(r.status_reason),
        )
        for r in MemoryRecord.objects.filter(tenant_id=tenant_id).order_by("subject_id", "revision")
    ]


def _script(subject: str, tomorrow: datetime, last_month: datetime) -> list[Assertion]:
    def fact(value: int, revision: str, valid_from: datetime) -> Assertion:
        return Assertion(
            project_id="project-b",
            subject_id=subject,
            predicate="approval_limit",
            value=value,
            valid_from=valid_from,
            source_canonical_ref="handbook:expenses",
            source_revision=revision,
        )

    return [
        fact(100000, "r2", tomorrow),
        fact(50000, "r1", last_month),  # answers until tomorrow
        fact(40000, "r0", last_month - timedelta(days=30)),  # answers for the month before r1, in the past
        fact(30000, "r0", last_month + timedelta(days=2)),  # its start is r1's: history only
    ]


def test_one_by_one_and_in_a_batch_the_same_records_are_stored(agent, other_agent, tomorrow, last_month):
    now = timezone.now()
    outcomes = [assert_fact(agent, a, now=now).outcome for a in _script("single", tomorrow, last_month)]
    assert outcomes == [Outcome.CREATED, Outcome.CREATED, Outcome.HISTORY, Outcome.HISTORY]
    batch = assert_facts(agent, _script("batch", tomorrow, last_month), now=now)
    assert [item.outcome for item in batch.items] == [o.value for o in outcomes]
    single, batched = _stored(agent.tenant_id), _stored(agent.tenant_id)
    single = [row[1:] for row in single if row[0] == "single"]
    batched = [row[1:] for row in batched if row[0] == "batch"]
    assert single == batched
    past = reads.as_of(agent, "project-b", "batch", "approval_limit", valid_at=last_month - timedelta(days=1))
    assert past is not None and past.value == 40000
    today = reads.as_of(agent, "project-b", "batch", "approval_limit")
    assert today is not None and today.value == 50000


def test_a_late_revision_whose_whole_validity_nothing_covers_answers_for_it_and_has_expired(
    api, agent, rules, last_month
):
    old = limit(30000, "r0", last_month - timedelta(days=60), valid_to=last_month - timedelta(days=30))
    response = api(agent).post("/api/v1/records/", body(old), format="json")
    assert response.status_code == 200 and response.json()["outcome"] == "history"
    assert response.json()["status"] == "expired" and response.json()["superseded_by"] is None
    then = reads.as_of(agent, **LIMIT, valid_at=last_month - timedelta(days=45))
    assert then is not None and then.value == 30000
    assert reads.as_of(agent, **LIMIT, valid_at=last_month - timedelta(days=10)) is None  # nothing said then


def test_a_late_revision_with_a_stale_expected_revision_is_409_and_stores_nothing(api, agent, tomorrow, last_month):
    client = api(agent)
    client.post("/api/v1/records/", body(limit(100000, "r2", tomorrow)), format="json")
    before = MemoryRecord.objects.count()
    stale = client.post("/api/v1/records/", body(limit(50000, "r1", last_month, expected_revision=7)), format="json")
    assert stale.status_code == 409 and stale.json()["code"] == "revision_conflict"
    assert MemoryRecord.objects.count() == before


def test_tomorrows_verified_value_is_never_given_as_todays_last_verified_value(agent, now, tomorrow, last_month):
    # r2 was fetched from the canonical source; r1, arriving late, never was.
    assert_fact(
        agent, limit(100000, "r2", tomorrow), now=now - timedelta(hours=2), verified_at=now - timedelta(hours=2)
    )
    r1 = assert_fact(agent, limit(50000, "r1", last_month), now=now - timedelta(hours=1)).record
    view = reads.fact_view(agent, **LIMIT)
    assert view.record is not None and view.record.pk == r1.pk
    assert view.freshness == "never_verified"
    assert view.last_verified_at is None and view.last_verified_value is None
    assert "100000" not in (view.caveat or "")
    r1.refresh_from_db()
    [(_, hit)] = reads.record_views([MemoryRecord.objects.select_related("project").get(pk=r1.pk)]).items()
    assert hit.last_verified_value is None and hit.caveat == view.caveat


def test_the_recheck_engine_keeps_the_late_revision_fresh_until_the_hand_over(agent, rules, now, tomorrow):
    r1, r2 = rules
    fresh = set(MemoryRecord.objects.for_tenant(agent.tenant_id).kept_fresh(now).values_list("pk", flat=True))
    assert {r1.pk, r2.pk} <= fresh
    r1.refresh_from_db()
    assert r1.kept_fresh_at(now) and not r1.kept_fresh_at(tomorrow)
