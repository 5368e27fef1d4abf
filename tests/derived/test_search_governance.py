"""Search hits carry the governance facts `facts/current` gives for the same fact (one rule, one instant),
computed for all k hits in a constant number of queries. The facts are searched right after their writes, as an
agent does: found before their vector entries are written (read-your-writes), with no refresh run by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import FieldPolicy
from memory_admin.memory.rechecks import report_recheck
from tests.support import DEADLINE, deadline

# The fields of a hit that must agree with `GET /facts/current/` for the same fact.
SHARED = (
    "memory_id",
    "revision",
    "status",
    "value",
    "valid_from",
    "valid_to",
    "recheck_after",
    "source",
    "freshness",
    "last_verified_at",
    "last_verified_value",
    "caveat",
    "action_allowed",
)
QUERY = {"project_id": "project-a", "q": "submission deadline proposal", "k": 10}


@pytest.fixture
def block_action(admin):
    """Acting on a deadline needs a value verified within a day (the field's policy)."""
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        recheck_interval=timedelta(days=1),
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        authorized_issuers=["agent-7", "olivia"],
    )


def other_deadline(
    subject: str, value: str, revision: str, valid_from, ref: str = "task-system:", **kwargs
) -> Assertion:
    return Assertion(
        **{**DEADLINE, "subject_id": subject},
        value=value,
        valid_from=valid_from,
        source_canonical_ref=f"{ref}project-a/{subject}",
        source_revision=revision,
        **kwargs,
    )


def note(subject: str, value: str, valid_from) -> Assertion:
    """A field without any policy: acting on it never waits for a verification."""
    return Assertion(
        project_id="project-a",
        subject_id=subject,
        predicate="submission_deadline_note",
        value=value,
        valid_from=valid_from,
        source_canonical_ref=f"notes:{subject}",
        source_revision="n1",
    )


def hits_by_id(client, **params):
    response = client.get("/api/v1/search/", {**QUERY, **params})
    assert response.status_code == 200, response.json()
    return {h["memory_id"]: h for h in response.json()["results"]}


def assert_agrees_with_current(client, hit):
    key = {"project_id": hit["project_id"], "subject_id": hit["subject_id"], "predicate": hit["predicate"]}
    current = client.get("/api/v1/facts/current/", key)
    assert current.status_code == 200, current.json()
    fact = current.json()
    assert {f: hit[f] for f in SHARED} == {f: fact[f] for f in SHARED}


def test_hits_carry_what_facts_current_says(api, agent, block_action):
    now = timezone.now()
    past = now - timedelta(days=3)
    # Fresh: verified an hour ago, recheck due tomorrow.
    fresh = assert_fact(
        agent, deadline("2026-11-02T17:00+09:00", "r18", past), now=past, verified_at=now - timedelta(hours=1)
    ).record
    # Overdue: verified three days ago, its recheck was due two days ago; a failed recheck is on record.
    overdue = assert_fact(
        agent,
        other_deadline("task-proposal-018", "2026-11-05T17:00+09:00", "r3", past),
        now=past,
        verified_at=past,
    ).record
    report_recheck(agent, overdue, outcome="source_unavailable", error="connection refused")
    # Never verified itself: the successor of a verified revision (the last verified value is the earlier one).
    # A tracker that is not the canonical source, so that an unverified revision may supersede a verified one.
    assert_fact(
        agent,
        other_deadline("task-proposal-019", "2026-11-07T17:00+09:00", "r1", past, ref="tracker:"),
        now=past,
        verified_at=past,
    )
    successor = assert_fact(
        agent,
        other_deadline(
            "task-proposal-019",
            "2026-11-09T17:00+09:00",
            "r2",
            past + timedelta(hours=1),
            ref="tracker:",
            expected_revision=1,
        ),
    ).record
    assert successor.status == "accepted" and successor.revision == 2
    # Never verified, on a field without a policy: an answer may be acted on.
    free = assert_fact(agent, note("task-proposal-020", "submission deadline proposal moved", past)).record

    client = api(agent)
    hits = hits_by_id(client)
    assert set(hits) == {fresh.memory_id, overdue.memory_id, successor.memory_id, free.memory_id}

    assert hits[fresh.memory_id]["freshness"] == "fresh"
    assert hits[fresh.memory_id]["caveat"] is None
    assert hits[fresh.memory_id]["action_allowed"] is True

    assert hits[overdue.memory_id]["freshness"] == "recheck_due"
    assert hits[overdue.memory_id]["action_allowed"] is False
    # The search made no attempt: the caveat says when the last one failed, not that this call could not confirm.
    assert "the last attempt, at" in hits[overdue.memory_id]["caveat"]
    assert hits[overdue.memory_id]["last_verified_at"] == past.isoformat()

    unverified = hits[successor.memory_id]
    assert unverified["freshness"] == "never_verified" and unverified["action_allowed"] is False
    assert unverified["last_verified_value"] == "2026-11-07T17:00+09:00"
    assert unverified["last_verified_at"] == past.isoformat()

    assert hits[free.memory_id]["freshness"] == "never_verified"
    assert hits[free.memory_id]["action_allowed"] is True
    assert hits[free.memory_id]["caveat"].startswith("Not verified against the canonical source")

    for hit in hits.values():
        assert hit["usable"] is True
        assert_agrees_with_current(client, hit)


def test_held_back_hits_carry_no_governance_facts(api, agent, block_action):
    past = timezone.now() - timedelta(days=3)
    tracker = "tracker:project-a/task-proposal-017"
    old = assert_fact(
        agent, deadline("2026-10-30T17:00+09:00", "r17", past, ref=tracker), now=past, verified_at=past
    ).record
    new = assert_fact(
        agent, deadline("2026-11-02T17:00+09:00", "r18", past + timedelta(hours=1), ref=tracker, expected_revision=1)
    ).record
    hits = hits_by_id(api(agent), include="all")
    held = hits[old.memory_id]
    assert held["usable"] is False and held["reason_code"] == "superseded"
    assert (held["freshness"], held["caveat"], held["action_allowed"], held["last_verified_at"]) == (None,) * 4
    assert held["source"]["revision"] == "r17"
    assert hits[new.memory_id]["action_allowed"] is False
    assert hits[new.memory_id]["last_verified_value"] == "2026-10-30T17:00+09:00"
    assert_agrees_with_current(api(agent), hits[new.memory_id])


def test_the_facts_of_k_hits_take_a_constant_number_of_queries(api, agent, block_action):
    past = timezone.now() - timedelta(days=3)

    def facts(n: int, start: int) -> list[str]:
        ids = []
        for i in range(start, start + n):
            subject = f"task-proposal-{i:03d}"
            first = assert_fact(
                agent,
                other_deadline(subject, "2026-11-05T17:00+09:00", "r1", past, ref="tracker:"),
                now=past,
                verified_at=past,
            ).record
            second = assert_fact(
                agent,
                other_deadline(
                    subject,
                    "2026-11-06T17:00+09:00",
                    "r2",
                    past + timedelta(hours=1),
                    ref="tracker:",
                    expected_revision=1,
                ),
            ).record
            report_recheck(agent, first, outcome="source_unavailable", error="down")
            report_recheck(agent, second, outcome="source_unavailable", error="down")
            ids += [first.memory_id, second.memory_id]
        return ids

    client = api(agent)
    facts(2, 100)
    hits_by_id(client)  # warm: authentication, throttles, index
    with CaptureQueriesContext(connection) as few:
        assert len(hits_by_id(client)) == 2
    facts(6, 200)
    with CaptureQueriesContext(connection) as many:
        assert len(hits_by_id(client)) == 8
    assert len(many.captured_queries) == len(few.captured_queries)
