"""Reads for answering carry freshness; reads for acting stop when the field demands a fresh value."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import FieldPolicy
from tests.conftest import DEADLINE, deadline

SEND = {"project_id": "project-a", "subject_id": "agent-mailer", "predicate": "submission_deadline"}


@pytest.fixture
def blocking_policy(admin):
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        recheck_interval=timedelta(days=1),
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        recheck_before_action=True,
    )


def test_a_value_never_verified_answers_with_a_caveat(api, agent):
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=1)))
    data = api(agent).get("/api/v1/facts/current/", DEADLINE).json()
    assert data["freshness"] == "never_verified"
    assert "Not verified" in data["caveat"]
    assert data["last_verified_value"] is None
    assert data["action_allowed"] is True  # no policy blocks actions on this field


def test_a_verified_value_within_its_interval_is_fresh_and_actionable(api, agent, blocking_policy):
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=2)), verified_at=now - timedelta(hours=1))
    data = api(agent).get("/api/v1/facts/current/", {**DEADLINE, "purpose": "action"}).json()
    assert data["freshness"] == "fresh"
    assert data["caveat"] is None
    assert data["action_allowed"] is True
    assert data["last_verified_value"] == "2026-11-02"


def test_acting_on_a_value_past_its_recheck_is_refused_with_the_last_verified_value(api, agent, blocking_policy):
    now = timezone.now()
    verified = now - timedelta(days=3)
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(days=4)), verified_at=verified)
    response = api(agent).get("/api/v1/facts/current/", {**DEADLINE, "purpose": "action"})
    assert response.status_code == 409
    data = response.json()
    assert data["code"] == "recheck_required"
    assert data["last_verified_value"] == "2026-11-02"
    assert data["last_verified_at"] == verified.isoformat()
    assert "on hold" in data["detail"]


def test_answering_from_a_value_past_its_recheck_is_allowed_with_a_caveat(api, agent, blocking_policy):
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(days=4)), verified_at=now - timedelta(days=3))
    response = api(agent).get("/api/v1/facts/current/", {**DEADLINE, "purpose": "answer"})
    assert response.status_code == 200
    data = response.json()
    assert data["freshness"] == "recheck_due"
    assert data["action_allowed"] is False
    assert "has not been confirmed since" in data["caveat"]


def test_an_unverified_new_value_reports_the_last_verified_one(api, agent, blocking_policy):
    now = timezone.now()
    first = assert_fact(
        agent, deadline("2026-10-30", "r17", now - timedelta(days=2)), verified_at=now - timedelta(days=2)
    )
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=1), expected_revision=first.record.revision))
    data = api(agent).get("/api/v1/facts/current/", DEADLINE).json()
    assert data["value"] == "2026-11-02"
    assert data["freshness"] == "never_verified"
    assert data["last_verified_value"] == "2026-10-30"


def test_a_policy_sets_recheck_after_and_retention_on_new_records(agent, admin):
    FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", recheck_interval=timedelta(hours=6), retention_days=30
    )
    now = timezone.now()
    record = assert_fact(agent, deadline("2026-11-02", "r18", now), now=now, verified_at=now).record
    assert record.recheck_after == now + timedelta(hours=6)
    assert record.retain_until == now + timedelta(days=30)


def test_an_unknown_fact_is_404(api, agent):
    response = api(agent).get("/api/v1/facts/current/", DEADLINE)
    assert response.status_code == 404
    assert "nothing is recorded" in response.json()["detail"]
