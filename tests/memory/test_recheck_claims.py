"""An agent cannot verify its own guess (issue 10, item 5; PRODUCT.md rules 7 and 9).

Only a value the server fetched from the field's canonical source, or one reported by a principal the
policy names as that source (`canonical_source.reporters`, or a person for a manual field), verifies.
Any other verified report is stored as not_checked with the claim kept, and the response says so.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import AuditEvent, FieldPolicy, MemoryRecord, RecheckAttempt
from tests.support import deadline
from tests.support.canonical_source import http_json_source

SEND = {"project_id": "project-a", "subject_id": "agent-mailer", "predicate": "send_permission"}


@pytest.fixture
def iam_policy(admin):
    """The demo's send permission: canonical refs under `iam:`, actions blocked unless verified."""
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="send_permission",
        canonical_ref_prefix="iam:",
        recheck_interval=timedelta(hours=6),
        recheck_before_action=True,
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        risk=FieldPolicy.Risk.HIGH,
    )


@pytest.fixture
def guess(api, agent, iam_policy):
    """The agent writes its guess: send permission "allowed", never verified."""
    body = {
        **SEND,
        "value": "allowed",
        "valid_from": timezone.now().isoformat(),
        "source": {"canonical_ref": "iam:agent-mailer", "revision": "1"},
    }
    response = api(agent).post("/api/v1/records/", body, format="json")
    assert response.status_code == 201, response.json()
    return MemoryRecord.objects.get(memory_id=response.json()["memory_id"])


def act(api, principal):
    return api(principal).get("/api/v1/facts/current/", {**SEND, "purpose": "action"})


def test_an_agent_cannot_verify_its_own_guess_with_a_made_up_source_ref(api, agent, guess):
    assert act(api, agent).status_code == 409
    response = api(agent).post(
        f"/api/v1/records/{guess.memory_id}/rechecks/",
        {"outcome": "verified_unchanged", "source_ref": "iam:i-made-this-up"},
        format="json",
    )
    assert response.status_code == 201
    data = response.json()
    assert data["outcome"] == "not_checked"
    assert data["error"].startswith("Not verified:")
    assert "verified_unchanged" in data["error"] and "iam:i-made-this-up" in data["error"]  # the claim, kept
    assert data["source_ref"] == "iam:i-made-this-up"
    attempt = RecheckAttempt.objects.get(record=guess)
    assert attempt.outcome == "not_checked" and "iam:i-made-this-up" in attempt.error
    assert MemoryRecord.objects.get(pk=guess.pk).last_verified_at is None
    still = act(api, agent)
    assert still.status_code == 409 and still.json()["code"] == "recheck_required"
    assert AuditEvent.objects.filter(action="record.rechecked.not_checked", object_id=guess.memory_id).exists()


def test_a_claimed_change_is_kept_as_a_claim_and_changes_nothing(api, agent, guess):
    response = api(agent).post(
        f"/api/v1/records/{guess.memory_id}/rechecks/",
        {"outcome": "verified_changed", "observed_value": "revoked", "source_ref": "iam:x", "source_revision": "9"},
        format="json",
    )
    assert response.status_code == 201
    data = response.json()
    assert data["outcome"] == "not_checked" and data["new_memory_id"] is None
    assert data["observed_value"] == "revoked" and "'9'" in data["error"]
    head = MemoryRecord.objects.get(subject_id="agent-mailer", is_head=True)
    assert head.pk == guess.pk and head.value == "allowed" and head.last_verified_at is None


def test_the_principal_the_policy_names_as_the_source_verifies(api, agent, other_agent, guess, iam_policy):
    """`canonical_source.reporters` names who speaks for the source; naming is done by an admin."""
    iam_policy_body = {"canonical_source": {"connector": "manual", "reporters": [other_agent.name]}}
    # The agent cannot name itself: policies are for admins.
    url = f"/api/v1/field-policies/{iam_policy.pk}/"
    assert api(agent).patch(url, iam_policy_body, format="json").status_code == 403
    iam_policy.canonical_source = iam_policy_body["canonical_source"]
    iam_policy.save()
    mine = api(agent).post(
        f"/api/v1/records/{guess.memory_id}/rechecks/", {"outcome": "verified_unchanged"}, format="json"
    )
    assert mine.json()["outcome"] == "not_checked"
    theirs = api(other_agent).post(
        f"/api/v1/records/{guess.memory_id}/rechecks/",
        {"outcome": "verified_unchanged", "source_revision": "7"},
        format="json",
    )
    assert theirs.status_code == 201 and theirs.json()["outcome"] == "verified_unchanged"
    assert MemoryRecord.objects.get(pk=guess.pk).last_verified_at is not None
    allowed = act(api, agent)
    assert allowed.status_code == 200 and allowed.json()["action_allowed"] is True


def test_an_admin_names_reporters_through_the_api_and_bad_ones_are_a_400(api, admin, iam_policy):
    url = f"/api/v1/field-policies/{iam_policy.pk}/"
    ok = api(admin).patch(url, {"canonical_source": {"connector": "manual", "reporters": ["iam-sync"]}}, format="json")
    assert ok.status_code == 200, ok.json()
    assert ok.json()["canonical_source"]["reporters"] == ["iam-sync"]
    for bad in ("iam-sync", [1], [""], ["x"] * 51):
        response = api(admin).patch(url, {"canonical_source": {"connector": "manual", "reporters": bad}}, format="json")
        assert response.status_code == 400
        assert "reporters" in " ".join(response.json()["errors"]["canonical_source"])


def test_on_a_fetched_field_only_the_server_or_a_named_reporter_verifies(api, agent, other_agent, admin, source):
    policy = FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        canonical_source=http_json_source(source[0], timeout=0.5),
        recheck_interval=timedelta(days=1),
    )
    past = timezone.now() - timedelta(days=3)
    record = assert_fact(agent, deadline("2026-11-02", "r18", past), now=past, verified_at=past).record
    url = f"/api/v1/records/{record.memory_id}/rechecks/"
    # A ref under the canonical prefix, the record's own: still only a claim.
    claimed = api(agent).post(
        url, {"outcome": "verified_unchanged", "source_ref": record.source_canonical_ref}, format="json"
    )
    assert claimed.json()["outcome"] == "not_checked"
    assert "the server fetches it itself" in claimed.json()["error"]
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at == record.last_verified_at
    policy.canonical_source = {**(policy.canonical_source or {}), "reporters": [other_agent.name]}
    policy.save()
    named = api(other_agent).post(url, {"outcome": "verified_unchanged"}, format="json")
    assert named.json()["outcome"] == "verified_unchanged"
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at > record.last_verified_at


def test_on_a_manual_field_a_person_verifies_and_an_agent_does_not(api, owner, agent, admin):
    FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_source={"connector": "manual"},
        authorized_issuers=["olivia", "agent-7"],
    )
    record = assert_fact(owner, deadline("2026-11-02", "r18", timezone.now())).record
    url = f"/api/v1/records/{record.memory_id}/rechecks/"
    by_agent = api(agent).post(url, {"outcome": "verified_unchanged"}, format="json")
    assert by_agent.status_code == 201 and by_agent.json()["outcome"] == "not_checked"
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at is None
    by_person = api(owner).post(url, {"outcome": "verified_unchanged"}, format="json")
    assert by_person.status_code == 201 and by_person.json()["outcome"] == "verified_unchanged"
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at is not None


def test_a_field_without_a_policy_is_never_verified_by_a_report(api, agent):
    other = Assertion(
        project_id="project-a",
        subject_id="sato",
        predicate="meeting_room",
        value="4F",
        valid_from=timezone.now(),
        source_canonical_ref="calendar:sato",
        source_revision="1",
    )
    record = assert_fact(agent, other).record
    response = api(agent).post(
        f"/api/v1/records/{record.memory_id}/rechecks/",
        {"outcome": "verified_unchanged", "source_ref": "calendar:sato"},
        format="json",
    )
    assert response.status_code == 201 and response.json()["outcome"] == "not_checked"
    assert "no policy" in response.json()["error"]


def test_an_outsider_cannot_report_at_all(api, outsider, guess):
    response = api(outsider).post(
        f"/api/v1/records/{guess.memory_id}/rechecks/", {"outcome": "verified_unchanged"}, format="json"
    )
    assert response.status_code == 404
    assert not RecheckAttempt.objects.exists()


def test_the_policy_editor_keeps_the_reporters(admin, iam_policy):
    from django.test import Client

    client = Client()
    client.force_login(admin)
    form = {
        "project_id": "",
        "predicate": "send_permission",
        "authorized_issuers": "",
        "canonical_ref_prefix": "iam:",
        "connector": "manual",
        "reporters": "iam-sync, task-system",
        "recheck_interval": "PT6H",
        "recheck_before_action": "on",
        "on_failure": "block_action",
        "risk": "high",
    }
    assert client.post(f"/policies/{iam_policy.pk}/", form).status_code == 302
    iam_policy.refresh_from_db()
    assert iam_policy.canonical_source == {"connector": "manual", "reporters": ["iam-sync", "task-system"]}
    assert "iam-sync, task-system" in client.get(f"/policies/{iam_policy.pk}/").content.decode()
    no_source = {**form, "connector": ""}
    assert client.post(f"/policies/{iam_policy.pk}/", no_source).status_code == 400
