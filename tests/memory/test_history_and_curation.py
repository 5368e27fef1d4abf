"""History chains, disputes and their resolution, exclude and expire, by role, with status codes."""

from __future__ import annotations

from typing import Any

import pytest

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord
from tests.support import DEADLINE, at, deadline

PRICE: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}


@pytest.fixture
def price_dispute(agent, other_agent) -> Dispute:
    assert_fact(
        agent,
        Assertion(**PRICE, value=1200, valid_from=at(10, 26), source_canonical_ref="vendor:x", source_revision="a"),
        now=at(10, 26, 8),
    )
    result = assert_fact(
        other_agent,
        Assertion(**PRICE, value=1350, valid_from=at(10, 26), source_canonical_ref="partner:x", source_revision="b"),
        now=at(10, 26, 9),
    )
    assert result.dispute is not None
    return result.dispute


def test_history_lists_the_whole_chain_oldest_first(api, agent, moved_deadline):
    assert_fact(agent, deadline("2026-11-05T17:00+09:00", "r19", at(10, 24), expected_revision=2), now=at(10, 24))
    memory_id = moved_deadline[0].record.memory_id
    chain = api(agent).get(f"/api/v1/records/{memory_id}/history/").json()["results"]
    assert [r["revision"] for r in chain] == [1, 2, 3]
    assert [r["status"] for r in chain] == ["superseded", "superseded", "accepted"]
    assert chain[0]["superseded_by"] == chain[1]["memory_id"]
    assert chain[2]["supersedes"] == [chain[1]["memory_id"]]


def test_disputed_fact_shows_both_candidates_and_no_invented_value(api, agent, price_dispute):
    data = api(agent).get("/api/v1/facts/current/", PRICE).json()
    assert data["status"] == "disputed"
    assert data["value"] is None
    assert data["action_allowed"] is False
    assert sorted((c["value"], c["source"]["canonical_ref"]) for c in data["candidates"]) == [
        (1200, "vendor:x"),
        (1350, "partner:x"),
    ]


def test_acting_on_a_disputed_fact_is_refused(api, agent, price_dispute):
    response = api(agent).get("/api/v1/facts/current/", {**PRICE, "purpose": "action"})
    assert response.status_code == 409
    assert response.json()["code"] == "fact_disputed"


def test_a_new_value_during_a_dispute_is_refused(api, agent, price_dispute):
    response = api(agent).post(
        "/api/v1/records/",
        {
            **PRICE,
            "value": 999,
            "valid_from": at(10, 27).isoformat(),
            "expected_revision": 1,
            "source": {"canonical_ref": "vendor:x", "revision": "c"},
        },
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["code"] == "dispute_open"


def test_the_disputes_queue_lists_open_disputes(api, owner, price_dispute):
    results = api(owner).get("/api/v1/disputes/").json()["results"]
    assert [d["id"] for d in results] == [price_dispute.public_id]


def test_an_owner_resolves_a_dispute_with_a_winner_and_the_loser_stays_as_history(api, owner, agent, price_dispute):
    winner = next(c for c in price_dispute.candidates.all() if c.value == 1350)
    response = api(owner).post(
        f"/api/v1/disputes/{price_dispute.public_id}/resolve/",
        {"winner": winner.memory_id, "reason": "Partner catalog is contractually binding"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "resolved"
    current = api(agent).get("/api/v1/facts/current/", PRICE).json()
    assert current["value"] == 1350 and current["status"] == "accepted"
    loser = next(c for c in price_dispute.candidates.all() if c.value == 1200)
    assert loser.status == "superseded" and loser.superseded_by_id == winner.pk
    assert AuditEvent.objects.filter(action="dispute.resolved", object_id=price_dispute.public_id).exists()


def test_resolving_needs_a_reason(api, owner, price_dispute):
    winner = price_dispute.candidates.first()
    response = api(owner).post(
        f"/api/v1/disputes/{price_dispute.public_id}/resolve/",
        {"winner": winner.memory_id, "reason": " "},
        format="json",
    )
    assert response.status_code == 400
    assert "reason" in response.json()["errors"]
    assert Dispute.objects.get(pk=price_dispute.pk).status == "open"


def test_resolving_with_a_record_that_is_not_a_candidate_is_400(api, owner, price_dispute, moved_deadline):
    response = api(owner).post(
        f"/api/v1/disputes/{price_dispute.public_id}/resolve/",
        {"winner": moved_deadline[1].record.memory_id, "reason": "x"},
        format="json",
    )
    assert response.status_code == 400


def test_excluding_both_candidates_leaves_no_usable_value(api, owner, agent, price_dispute):
    response = api(owner).post(
        f"/api/v1/disputes/{price_dispute.public_id}/resolve/",
        {"exclude_all": True, "reason": "Both wrong"},
        format="json",
    )
    assert response.status_code == 200
    assert set(price_dispute.candidates.values_list("status", flat=True)) == {"excluded"}
    assert api(agent).get("/api/v1/facts/current/", PRICE).status_code == 404


def test_an_agent_may_not_resolve_disputes(api, agent, price_dispute):
    response = api(agent).post(
        f"/api/v1/disputes/{price_dispute.public_id}/resolve/",
        {"winner": price_dispute.candidates.first().memory_id, "reason": "mine"},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"


def test_resolving_twice_is_409(api, owner, price_dispute):
    winner = price_dispute.candidates.first().memory_id
    url = f"/api/v1/disputes/{price_dispute.public_id}/resolve/"
    assert api(owner).post(url, {"winner": winner, "reason": "x"}, format="json").status_code == 200
    again = api(owner).post(url, {"winner": winner, "reason": "x"}, format="json")
    assert again.status_code == 409
    assert again.json()["code"] == "invalid_state"


def test_an_owner_excludes_a_record_and_agents_no_longer_get_it(api, owner, agent, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = api(owner).post(f"/api/v1/records/{memory_id}/exclude/", {"reason": "Wrong task"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "excluded"
    assert api(agent).get("/api/v1/facts/current/", DEADLINE).status_code == 404
    event = AuditEvent.objects.get(action="record.excluded")
    assert event.reason == "Wrong task" and (event.before or {})["status"] == "accepted"


def test_excluding_needs_a_reason(api, owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = api(owner).post(f"/api/v1/records/{memory_id}/exclude/", {"reason": ""}, format="json")
    assert response.status_code == 400
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"


def test_an_agent_may_not_exclude_or_expire(api, agent, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    for verb in ("exclude", "expire"):
        response = api(agent).post(f"/api/v1/records/{memory_id}/{verb}/", {"reason": "x"}, format="json")
        assert response.status_code == 403, verb


def test_expiring_ends_validity_and_keeps_history(api, owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = api(owner).post(f"/api/v1/records/{memory_id}/expire/", {"reason": "Project closed"}, format="json")
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "expired" and data["valid_to"] is not None
    again = api(owner).post(f"/api/v1/records/{memory_id}/expire/", {"reason": "again"}, format="json")
    assert again.status_code == 409


def test_a_new_value_after_expiry_supersedes_the_expired_record(agent, owner, moved_deadline):
    from memory_admin.memory.actions import expire_record

    expired = expire_record(owner, moved_deadline[1].record.memory_id, "closed", now=at(10, 25))
    result = assert_fact(agent, deadline("2026-12-01", "r20", at(10, 26), expected_revision=2), now=at(10, 26))
    assert result.outcome.value == "created"
    expired.refresh_from_db()
    assert expired.status == "superseded" and expired.superseded_by_id == result.record.pk
