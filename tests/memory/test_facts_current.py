"""Reads for answering carry freshness; reads for acting stop when the field demands a fresh value."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory import reads, rechecks
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.errors import RecheckRequired
from memory_admin.memory.models import FieldPolicy, Project
from memory_admin.memory.policies import policy_for
from tests.support import DEADLINE, deadline

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


def test_an_unknown_fact_read_for_action_is_404(api, agent, blocking_policy):
    response = api(agent).get("/api/v1/facts/current/", {**DEADLINE, "purpose": "action"})
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_reading_a_fresh_value_for_action_reads_the_record_and_its_policy_once(
    agent, blocking_policy, django_assert_num_queries
):
    """The step before acting and the read share what they read: one query for the record, one for the policy."""
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=2)), verified_at=now - timedelta(hours=1))
    key = (DEADLINE["project_id"], DEADLINE["subject_id"], DEADLINE["predicate"])
    with django_assert_num_queries(2):
        checked = rechecks.recheck_before_action(agent, *key, purpose="action")
        view = reads.fact_view(agent, *key, purpose="action", checked=checked)
    assert checked is not None and checked.attempt is None and checked.policy == blocking_policy
    assert view.record == checked.record and view.action_allowed is True and view.freshness == "fresh"


def test_a_stale_value_read_for_action_is_refused_by_the_policy_read_before_it(agent, blocking_policy):
    """Without a source the server can fetch nothing is rechecked, and the policy read by the step before acting
    still blocks the action on a value past its recheck (PRODUCT.md rule 8)."""
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(days=4)), verified_at=now - timedelta(days=3))
    key = (DEADLINE["project_id"], DEADLINE["subject_id"], DEADLINE["predicate"])
    checked = rechecks.recheck_before_action(agent, *key, purpose="action")
    assert checked is not None and checked.attempt is None and checked.policy == blocking_policy
    with pytest.raises(RecheckRequired) as refused:
        reads.fact_view(agent, *key, purpose="action", checked=checked)
    assert refused.value.code == "recheck_required"


def test_a_read_as_of_an_instant_has_no_step_before_acting(agent, blocking_policy):
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=2)), verified_at=now - timedelta(hours=1))
    key = (DEADLINE["project_id"], DEADLINE["subject_id"], DEADLINE["predicate"])
    assert rechecks.recheck_before_action(agent, *key, purpose="action", valid_at=now) is None
    assert rechecks.recheck_before_action(agent, *key, purpose="answer") is None


def test_the_policy_read_before_acting_is_the_projects_own_else_the_tenant_wide_one(
    agent, blocking_policy, django_assert_num_queries
):
    """One rule (policies.policy_for): a project's own policy for the field wins over the tenant-wide one, and
    it comes with its project, so reading the project costs no query."""
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=2)), verified_at=now - timedelta(hours=1))
    key = (DEADLINE["project_id"], DEADLINE["subject_id"], DEADLINE["predicate"])
    blocked = rechecks.recheck_before_action(agent, *key, purpose="action")
    assert blocked is not None and blocked.policy == blocking_policy
    project = Project.objects.get(tenant=agent.tenant, key=DEADLINE["project_id"])
    own = FieldPolicy.objects.create(
        tenant=agent.tenant,
        project=project,
        predicate=DEADLINE["predicate"],
        on_failure=FieldPolicy.OnFailure.ANSWER_WITH_CAVEAT,
    )
    checked = rechecks.recheck_before_action(agent, *key, purpose="action")
    assert checked is not None and checked.policy is not None and checked.policy.project is not None
    assert checked.policy == own and checked.policy.on_failure == FieldPolicy.OnFailure.ANSWER_WITH_CAVEAT
    with django_assert_num_queries(0):
        assert (checked.policy.project.key, checked.policy.project.name) == (project.key, project.name)
        assert checked.policy.recheck_interval is None and checked.policy.authorized_issuers == []
    other = Project.objects.create(tenant=agent.tenant, key="project-b")
    assert policy_for(agent.tenant_pk, other.key, DEADLINE["predicate"]) == blocking_policy
    assert policy_for(agent.tenant_pk, other.key, "another_field") is None
    own_policy = policy_for(agent.tenant_pk, project.key, DEADLINE["predicate"])
    assert own_policy is not None and own_policy.recheck_interval is None
    other_policy = policy_for(agent.tenant_pk, other.key, DEADLINE["predicate"])
    assert other_policy is not None and other_policy.recheck_interval == timedelta(days=1)
