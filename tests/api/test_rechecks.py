"""Reading for action rechecks first; agents report rechecks; admins test a source."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from tests.support import DEADLINE, deadline
from tests.support.canonical_source import deadline_policy_checked_before_action

SUBJECT = DEADLINE["subject_id"]
ACTION = {**DEADLINE, "purpose": "action"}


@pytest.fixture
def policy(admin, source):
    return deadline_policy_checked_before_action(admin.tenant, source[0], authorized_issuers=["agent-7", "olivia"])


@pytest.fixture
def record(agent, policy):
    past = timezone.now() - timedelta(days=3)
    return assert_fact(
        agent,
        deadline("2026-11-02T17:00+09:00", "r18", past, ref="task-system:project-a/task-proposal-017"),
        now=past,
        verified_at=past,
    ).record


def test_acting_rechecks_first_and_allows_a_verified_value(api, agent, record, source):
    source[1].set(SUBJECT, value="2026-11-02T17:00+09:00", revision="r18")
    response = api(agent).get("/api/v1/facts/current/", ACTION)
    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["action_allowed"] is True and data["freshness"] == "fresh" and data["caveat"] is None
    assert source[1].hits[SUBJECT] == 1
    assert RecheckAttempt.objects.get(record=record).trigger == "action"


def test_acting_when_the_source_is_down_is_refused_with_the_last_verified_value(api, agent, record, source):
    source[1].set(SUBJECT, mode="error", status=503)
    response = api(agent).get("/api/v1/facts/current/", ACTION)
    assert response.status_code == 409
    data = response.json()
    assert data["code"] == "recheck_required"
    assert data["last_verified_value"] == "2026-11-02T17:00+09:00"
    assert data["last_verified_at"] == record.last_verified_at.isoformat()
    assert "could not be reached" in data["caveat"] and "on hold" in data["detail"]
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at == record.last_verified_at


def test_acting_when_the_source_times_out_is_refused_within_the_timeout(api, agent, record, source):
    source[1].set(SUBJECT, mode="slow", delay=3)
    started = timezone.now()
    response = api(agent).get("/api/v1/facts/current/", ACTION)
    assert response.status_code == 409
    assert (timezone.now() - started) < timedelta(seconds=2.5)
    assert "did not answer within" in response.json()["caveat"]


def test_answering_when_the_source_is_down_gives_the_value_with_a_caveat(api, agent, record, source):
    source[1].set(SUBJECT, mode="error", status=500)
    api(agent).get("/api/v1/facts/current/", ACTION)  # a failed attempt is on record
    response = api(agent).get("/api/v1/facts/current/", DEADLINE)
    assert response.status_code == 200
    data = response.json()
    assert data["value"] == "2026-11-02T17:00+09:00"
    assert data["action_allowed"] is False
    assert "could not be reached" in data["caveat"]


def test_a_field_that_answers_with_a_caveat_lets_the_action_through(api, agent, record, source, policy):
    policy.on_failure = FieldPolicy.OnFailure.ANSWER_WITH_CAVEAT
    policy.save()
    source[1].set(SUBJECT, mode="error", status=500)
    response = api(agent).get("/api/v1/facts/current/", ACTION)
    assert response.status_code == 200
    assert response.json()["action_allowed"] is True
    assert "could not be reached" in response.json()["caveat"]


def test_acting_after_the_source_changed_uses_the_new_value(api, agent, record, source):
    source[1].set(SUBJECT, value="2026-11-05T17:00+09:00", revision="r19")
    data = api(agent).get("/api/v1/facts/current/", ACTION).json()
    assert data["value"] == "2026-11-05T17:00+09:00" and data["action_allowed"] is True
    assert data["revision"] == 2


def name_as_reporter(policy: FieldPolicy, *names: str) -> None:
    """The policy names these principals as speaking for its canonical source."""
    policy.canonical_source = {**(policy.canonical_source or {}), "reporters": list(names)}
    policy.save()


def test_a_canonical_report_verifies(api, agent, record, policy):
    name_as_reporter(policy, agent.name)
    response = api(agent).post(
        f"/api/v1/records/{record.memory_id}/rechecks/",
        {"outcome": "verified_unchanged", "observed_value": record.value, "source_revision": "r18"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at > record.last_verified_at


def test_a_report_from_outside_the_canonical_source_is_not_checked(api, agent, record):
    response = api(agent).post(
        f"/api/v1/records/{record.memory_id}/rechecks/",
        {"outcome": "verified_unchanged", "source_ref": "web-search:some-snippet"},
        format="json",
    )
    assert response.status_code == 201
    data = response.json()
    assert data["outcome"] == "not_checked"
    assert data["error"].startswith("Not verified") and "web-search:some-snippet" in data["error"]
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at == record.last_verified_at


def test_an_unauthorized_issuer_cannot_verify(api, other_agent, record):
    response = api(other_agent).post(
        f"/api/v1/records/{record.memory_id}/rechecks/", {"outcome": "verified_unchanged"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["code"] == "issuer_not_authorized"


def test_a_reported_failure_is_recorded_and_moves_nothing(api, other_agent, record):
    response = api(other_agent).post(
        f"/api/v1/records/{record.memory_id}/rechecks/",
        {"outcome": "source_unavailable", "error": "task system timed out"},
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["outcome"] == "source_unavailable"
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at == record.last_verified_at
    listed = api(other_agent).get(f"/api/v1/records/{record.memory_id}/rechecks/").json()["results"]
    assert [a["outcome"] for a in listed] == ["source_unavailable"]


def test_a_reported_change_supersedes_with_the_reporter_as_issuer(api, agent, record, policy):
    name_as_reporter(policy, agent.name)
    response = api(agent).post(
        f"/api/v1/records/{record.memory_id}/rechecks/",
        {"outcome": "verified_changed", "observed_value": "2026-11-09T17:00+09:00", "source_revision": "r20"},
        format="json",
    )
    assert response.status_code == 201
    new_id = response.json()["new_memory_id"]
    new = MemoryRecord.objects.get(memory_id=new_id)
    assert new.issuer == agent and new.value == "2026-11-09T17:00+09:00" and new.last_verified_at is not None


def test_bad_reports_are_400(api, agent, record):
    url = f"/api/v1/records/{record.memory_id}/rechecks/"
    assert api(agent).post(url, {"outcome": "probably_fine"}, format="json").status_code == 400
    changed_without_value = api(agent).post(url, {"outcome": "verified_changed"}, format="json")
    assert changed_without_value.status_code == 400
    inconsistent = api(agent).post(url, {"outcome": "verified_unchanged", "observed_value": "other"}, format="json")
    assert inconsistent.status_code == 400


def test_compliance_cannot_report_and_outsiders_get_404(api, compliance, outsider, record):
    url = f"/api/v1/records/{record.memory_id}/rechecks/"
    assert api(compliance).post(url, {"outcome": "not_checked"}, format="json").status_code == 403
    assert api(outsider).post(url, {"outcome": "not_checked"}, format="json").status_code == 404
    assert api(outsider).get(url).status_code == 404


def test_an_admin_tests_a_source_without_storing_anything(api, admin, record, source, policy):
    source[1].set(SUBJECT, value="2026-11-05T17:00+09:00", revision="r19")
    response = api(admin).post(
        f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": SUBJECT, "project_id": "project-a"}, format="json"
    )
    assert response.status_code == 200
    data = response.json()
    assert data["outcome"] == "verified_changed" and data["observed_value"] == "2026-11-05T17:00+09:00"
    assert data["current_value"] == "2026-11-02T17:00+09:00"
    assert RecheckAttempt.objects.count() == 0
    source[1].set(SUBJECT, mode="error", status=500)
    down = api(admin).post(f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": SUBJECT}, format="json")
    assert down.json()["outcome"] == "source_unavailable"


def test_only_admins_test_sources(api, owner, policy):
    response = api(owner).post(f"/api/v1/field-policies/{policy.pk}/test/", {"subject_id": SUBJECT}, format="json")
    assert response.status_code == 403
