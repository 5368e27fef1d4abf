"""Each step of assert_fact's decision order, through the API, with its status code."""

from __future__ import annotations

from datetime import timedelta

from memory_admin.memory.models import AuditEvent, Dispute, FieldPolicy, MemoryRecord
from tests.support import DEADLINE, TASK_REF, at, body, deadline


def test_a_first_assertion_is_accepted_with_201(api, agent):
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))), format="json"
    )
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["status"] == "accepted"
    assert data["revision"] == 1
    assert data["outcome"] == "created"
    assert data["source"] == {
        "canonical_ref": TASK_REF,
        "revision": "r17",
        "issuer_principal_id": "agent-7",
        "event_ids": [],
    }
    assert data["recorded_to"] is None and data["valid_to"] is None


def test_it_refuses_invalid_input_with_a_reason_per_field(api, agent):
    response = api(agent).post("/api/v1/records/", {"project_id": "project-a"}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    # valid_from may be left out (it defaults to the time of the request); the rest is named, the source included.
    assert {"subject_id", "predicate", "value", "source"} <= set(errors) and "valid_from" not in errors
    assert response.json()["code"] == "invalid"
    assert MemoryRecord.objects.count() == 0


def test_it_refuses_unauthorized_issuer_with_403_and_stores_nothing(api, agent, admin):
    FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline", authorized_issuers=["olivia"])
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))), format="json"
    )
    assert response.status_code == 403
    assert response.json()["code"] == "issuer_not_authorized"
    assert MemoryRecord.objects.count() == 0


def test_a_compliance_officer_may_not_assert_facts(api, compliance):
    response = api(compliance).post(
        "/api/v1/records/", body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))), format="json"
    )
    assert response.status_code == 403
    assert response.json()["code"] == "issuer_not_authorized"


def test_an_authority_claim_in_the_body_proves_nothing(api, agent, admin):
    FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline", authorized_issuers=["olivia"])
    payload = body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    payload["source"]["issuer_principal_id"] = "olivia"
    payload["authority"] = "owner"
    response = api(agent).post("/api/v1/records/", payload, format="json")
    assert response.status_code == 403


def test_an_older_revision_imported_late_is_kept_as_history_never_current(api, agent, moved_deadline):
    # Valid from Oct 21, where the newer r17 already answers (tests/memory/test_out_of_order_revisions.py: where
    # nothing newer covers, a late revision answers).
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-10-28T17:00+09:00", "r16", at(10, 21))), format="json"
    )
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "superseded"
    assert data["outcome"] == "history"
    assert data["superseded_by"] == moved_deadline[1].record.memory_id
    current = api(agent).get("/api/v1/facts/current/", DEADLINE).json()
    assert current["value"] == "2026-11-02T17:00+09:00"
    # Even as of the late import's own valid time it never answers: the newer revision does.
    as_of = api(agent).get("/api/v1/facts/current/", {**DEADLINE, "valid_at": at(10, 21, 12).isoformat()})
    assert as_of.json()["value"] == "2026-10-30T17:00+09:00"


def test_a_lesser_source_never_edits_the_canonical_value(api, agent, admin, moved_deadline):
    FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        # The prefix alone is a claim: agent-7 is the principal the policy names for the task system.
        canonical_source={"connector": "manual", "reporters": ["agent-7"]},
    )
    guess = deadline("2026-11-09T17:00+09:00", "1", at(10, 23), ref="web:some-article", expected_revision=2)
    response = api(agent).post("/api/v1/records/", body(guess), format="json")
    assert response.status_code == 200
    assert response.json()["outcome"] == "history"
    assert api(agent).get("/api/v1/facts/current/", DEADLINE).json()["value"] == "2026-11-02T17:00+09:00"


def test_the_canonical_source_outranks_a_lesser_current_value(api, agent, admin):
    FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        # The prefix alone is a claim: agent-7 is the principal the policy names for the task system.
        canonical_source={"connector": "manual", "reporters": ["agent-7"]},
    )
    client = api(agent)
    client.post("/api/v1/records/", body(deadline("2026-11-09", "1", at(10, 20), ref="chat:msg-1")), format="json")
    response = client.post(
        "/api/v1/records/", body(deadline("2026-11-02", "r18", at(10, 20), expected_revision=1)), format="json"
    )
    assert response.status_code == 201
    assert response.json()["supersedes"] != []


def test_an_identical_repeat_is_idempotent_with_200(api, agent, moved_deadline):
    before = MemoryRecord.objects.count()
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-11-02T17:00+09:00", "r18", at(10, 22))), format="json"
    )
    assert response.status_code == 200
    assert response.json()["outcome"] == "unchanged"
    assert response.json()["memory_id"] == moved_deadline[1].record.memory_id
    assert MemoryRecord.objects.count() == before


def test_equal_rank_sources_that_disagree_are_both_kept_as_disputed_with_202(api, agent, other_agent):
    price = {
        "project_id": "project-a",
        "subject_id": "product-x",
        "predicate": "unit_price",
        "valid_from": at(10, 26).isoformat(),
    }
    first = api(agent).post(
        "/api/v1/records/",
        {**price, "value": 1200, "source": {"canonical_ref": "vendor:x", "revision": "a"}},
        format="json",
    )
    second = api(other_agent).post(
        "/api/v1/records/",
        {**price, "value": 1350, "source": {"canonical_ref": "partner:x", "revision": "b"}},
        format="json",
    )
    assert first.status_code == 201
    assert second.status_code == 202
    assert second.json()["status"] == "disputed"
    dispute = Dispute.objects.get(public_id=second.json()["dispute_id"])
    assert sorted(r.value for r in dispute.candidates.all()) == [1200, 1350]
    assert MemoryRecord.objects.get(memory_id=first.json()["memory_id"]).status == "disputed"


def test_a_change_without_expected_revision_is_428(api, agent, moved_deadline):
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-11-05T17:00+09:00", "r19", at(10, 24))), format="json"
    )
    assert response.status_code == 428
    assert response.json()["code"] == "expected_revision_required"


def test_a_change_with_a_stale_expected_revision_is_409_with_the_current_record(api, agent, moved_deadline):
    response = api(agent).post(
        "/api/v1/records/",
        body(deadline("2026-11-05T17:00+09:00", "r19", at(10, 24), expected_revision=1)),
        format="json",
    )
    assert response.status_code == 409
    data = response.json()
    assert data["code"] == "revision_conflict"
    assert data["current"]["revision"] == 2
    assert data["current"]["memory_id"] == moved_deadline[1].record.memory_id


def test_a_change_supersedes_the_old_record_and_keeps_its_history(moved_deadline):
    old, new = (MemoryRecord.objects.get(pk=r.record.pk) for r in moved_deadline)
    assert old.status == "superseded"
    assert old.superseded_by_id == new.pk
    assert old.valid_to == at(10, 22)
    assert old.recorded_to == at(10, 22, 9, 1)
    assert new.status == "accepted" and new.revision == 2 and new.is_head
    assert list(new.supersedes.values_list("memory_id", flat=True)) == [old.memory_id]
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["record.asserted.created", "record.superseded", "record.asserted.created"]


def test_a_value_valid_from_tomorrow_is_stored_now_and_answers_only_from_then(api, agent):
    from django.utils import timezone

    now = timezone.now()
    client = api(agent)
    limit = {"project_id": "p", "subject_id": "expense-policy", "predicate": "approval_limit"}
    client.post(
        "/api/v1/records/",
        {
            **limit,
            "value": 50000,
            "valid_from": (now - timedelta(days=30)).isoformat(),
            "source": {"canonical_ref": "handbook", "revision": "1"},
        },
        format="json",
    )
    tomorrow = now + timedelta(days=1)
    response = client.post(
        "/api/v1/records/",
        {
            **limit,
            "value": 100000,
            "valid_from": tomorrow.isoformat(),
            "expected_revision": 1,
            "source": {"canonical_ref": "handbook", "revision": "2"},
        },
        format="json",
    )
    assert response.status_code == 201
    assert client.get("/api/v1/facts/current/", limit).json()["value"] == 50000
    later = (tomorrow + timedelta(hours=1)).isoformat()
    assert client.get("/api/v1/facts/current/", {**limit, "valid_at": later}).json()["value"] == 100000
    old = MemoryRecord.objects.get(subject_id="expense-policy", revision=1)
    assert old.status == "accepted" and old.valid_to == tomorrow
