"""Today's value stays rechecked while a successor is scheduled.

The demo's `expense-policy · approval_limit` is 50000 today and 100000 from tomorrow. The successor holds the
fact's head (the compare-and-swap target), but today's record is the answer read for acting today: the sweep
must claim and recheck it, not only the head.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.rechecks import claim_due
from memory_admin.memory.tasks import recheck_record
from tests.support.canonical_source import Script, http_json_source, serving

LIMIT: dict[str, Any] = {"project_id": "project-a", "subject_id": "expense-policy", "predicate": "approval_limit"}


def limit(value: int, revision: str, valid_from: datetime, expected_revision: int | None = None) -> Assertion:
    return Assertion(
        **LIMIT,
        value=value,
        valid_from=valid_from,
        source_canonical_ref="handbook:expenses",
        source_revision=revision,
        expected_revision=expected_revision,
    )


@pytest.fixture
def handbook(admin) -> Iterator[Script]:
    """The field's canonical source, fetched by the server; acting on a stale value is blocked."""
    with serving() as (base_url, script):
        FieldPolicy.objects.create(
            tenant=admin.tenant,
            predicate="approval_limit",
            canonical_source=http_json_source(base_url, timeout=0.5),
            recheck_interval=timedelta(days=1),
            on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        )
        yield script


@pytest.fixture
def scheduled(agent, handbook) -> tuple[MemoryRecord, MemoryRecord]:
    """50000 verified three days ago (due again since two days), and 100000 scheduled from tomorrow."""
    now = timezone.now()
    past = now - timedelta(days=3)
    today = assert_fact(agent, limit(50000, "2026.1", now - timedelta(days=30)), now=past, verified_at=past).record
    successor = assert_fact(agent, limit(100000, "2026.2", now + timedelta(days=1), expected_revision=1)).record
    today.refresh_from_db()
    assert today.status == "accepted" and not today.is_head and successor.is_head
    assert today.is_current_at(timezone.now())
    return today, successor


def test_todays_value_is_claimed_and_rechecked_by_the_sweep(scheduled, handbook, api, agent):
    today, _successor = scheduled
    handbook.set("expense-policy", value=50000, revision="2026.1")

    claimed = claim_due()
    assert today.pk in claimed  # not only the head: today's value is the one read for acting today
    assert recheck_record.apply(args=(today.pk,)).get() == "verified_unchanged"

    today.refresh_from_db()
    attempt = RecheckAttempt.objects.get(record=today)
    assert attempt.outcome == "verified_unchanged" and attempt.trigger == "sweep"
    assert today.last_verified_at == attempt.attempted_at
    assert today.recheck_after is not None and today.recheck_after > timezone.now()
    assert today.recheck_claimed_at is None and today.status == "accepted"
    assert MemoryRecord.objects.filter(subject_id="expense-policy").count() == 2  # nothing superseded

    # The read for acting today answers from the value the sweep just verified, without fetching again.
    hits = handbook.hits["expense-policy"]
    response = api(agent).get("/api/v1/facts/current/", {**LIMIT, "purpose": "action"})
    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["memory_id"] == today.memory_id and data["value"] == 50000
    assert data["freshness"] == "fresh" and data["action_allowed"] is True
    assert handbook.hits["expense-policy"] == hits


def test_the_scheduled_successor_may_be_rechecked_too(scheduled, handbook):
    _today, successor = scheduled
    handbook.set("expense-policy", value=100000, revision="2026.2")
    assert successor.pk in claim_due()
    assert recheck_record.apply(args=(successor.pk,)).get() == "verified_unchanged"
    successor.refresh_from_db()
    assert successor.last_verified_at is not None and successor.is_head


def test_a_different_value_for_today_is_flagged_not_applied(scheduled, handbook):
    """No compare-and-swap can replace today's value alone (the successor holds the head): an owner decides."""
    today, _successor = scheduled
    handbook.set("expense-policy", value=70000, revision="2026.1b")
    assert today.pk in claim_due()
    assert recheck_record.apply(args=(today.pk,)).get() == "source_ambiguous"
    today.refresh_from_db()
    assert today.attention and today.status == "accepted" and today.value == 50000
    assert today.last_verified_at is not None and today.last_verified_at < timezone.now() - timedelta(days=2)
    assert today.recheck_claimed_at is None
    assert MemoryRecord.objects.filter(subject_id="expense-policy").count() == 2


def test_a_record_whose_validity_ended_is_not_due(agent, handbook):
    now = timezone.now()
    past = now - timedelta(days=3)
    ended = assert_fact(
        agent,
        Assertion(
            **{**limit(50000, "2026.1", now - timedelta(days=30)).__dict__, "valid_to": now - timedelta(hours=1)}
        ),
        now=past,
        verified_at=past,
    ).record
    assert ended.status == "accepted"  # not yet settled by the valid-time task
    assert ended.pk not in claim_due()
    assert recheck_record.apply(args=(ended.pk,)).get() == "skipped"


def test_a_claimed_record_that_is_skipped_gives_its_claim_back(agent, handbook):
    """Claimed while due, then excluded before its recheck ran: the task skips it and ends the claim (the stamp
    and, on PostgreSQL, the claim row) at once, not when the lease runs out."""
    now = timezone.now()
    past = now - timedelta(days=3)
    record = assert_fact(agent, limit(50000, "2026.1", now - timedelta(days=30)), now=past, verified_at=past).record
    MemoryRecord.objects.filter(pk=record.pk).update(recheck_after=past)
    assert record.pk in claim_due()
    assert claimed(record.pk)
    MemoryRecord.objects.filter(pk=record.pk).update(status=MemoryRecord.Status.EXCLUDED)
    assert recheck_record.apply(args=(record.pk,)).get() == "skipped"
    assert not claimed(record.pk)
    assert MemoryRecord.objects.get(pk=record.pk).recheck_claimed_at is None


def claimed(record_id: int) -> bool:
    if connection.vendor != "postgresql":
        return MemoryRecord.objects.get(pk=record_id).recheck_claimed_at is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM memory_recheckclaim WHERE record_id = %s", [record_id])
        return cursor.fetchone() is not None
