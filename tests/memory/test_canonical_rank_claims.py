"""A canonical-prefix `canonical_ref` is a client's claim: it ranks as the canonical source only when backed.

PRODUCT.md rule 9: an agent's guess or an outside article never edits the canonical value. An agent allowed to
issue the field but not named as its source (`canonical_source.reporters`) gains nothing by writing a ref that
starts with the policy's `canonical_ref_prefix`; the named source, the recheck engine's principal and a value
the server fetched (assert_fact's `verified_at`) do outrank.
"""

from __future__ import annotations

import pytest

from memory_admin.accounts.services import ensure_principal
from memory_admin.memory.actions import Outcome, assert_fact
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord
from memory_admin.memory.rechecks import canonical_issuer
from tests.support import DEADLINE, TASK_REF, at, body, deadline


@pytest.fixture
def policy(admin) -> FieldPolicy:
    """As the demo's deadline policy: agent-7 speaks for the task system; agent-9 may issue, but is not it."""
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        authorized_issuers=["agent-7", "agent-9", "agent-3"],
        canonical_ref_prefix="task-system:",
        canonical_source={"connector": "manual", "reporters": ["agent-7"]},
    )


def current_value(api, agent) -> str:
    return api(agent).get("/api/v1/facts/current/", DEADLINE).json()["value"]


def test_an_unnamed_issuer_with_a_canonical_prefix_ref_does_not_outrank_the_named_source(
    api, agent, other_agent, policy
):
    assert assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22))).outcome == Outcome.CREATED
    # Same ref, a newer revision: before, equal rank by prefix, so "newer wins" superseded the canonical value.
    claim = deadline("2026-11-09", "r19", at(10, 23), expected_revision=1)
    response = api(other_agent).post("/api/v1/records/", body(claim), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["outcome"] == "history" and response.json()["status"] == "superseded"
    assert current_value(api, agent) == "2026-11-02"
    head = MemoryRecord.objects.get(is_head=True)
    assert head.issuer == agent and head.value == "2026-11-02"


def test_the_named_source_outranks_an_unbacked_claim(api, agent, other_agent, policy):
    assert_fact(other_agent, deadline("2026-11-09", "x1", at(10, 20)))
    # Revisions that do not order, the same valid_from: equal ranks would open a dispute; the source wins.
    response = api(agent).post(
        "/api/v1/records/", body(deadline("2026-11-02", "r18", at(10, 20), expected_revision=1)), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["outcome"] == "created"
    assert not Dispute.objects.exists()
    assert current_value(api, agent) == "2026-11-02"


def test_two_unbacked_claims_rank_equal(api, other_agent, policy):
    """Equal rank 0: a disagreement that cannot be ordered is a dispute; the same source orders by revision."""
    third = ensure_principal("acme", "agent-3", ["agent"])
    assert_fact(other_agent, deadline("2026-11-09", "x1", at(10, 20)))
    same = api(other_agent).post(
        "/api/v1/records/", body(deadline("2026-11-10", "x2", at(10, 20), expected_revision=1)), format="json"
    )
    assert same.status_code == 201, same.json()  # same source, newer revision
    other = api(third).post(
        "/api/v1/records/",
        body(deadline("2026-11-11", "q7", at(10, 20), ref="task-system:elsewhere", expected_revision=2)),
        format="json",
    )
    assert other.status_code == 202, other.json()
    assert other.json()["status"] == "disputed"


def test_the_recheck_engine_and_a_server_fetch_rank_as_the_source(agent, other_agent, policy):
    assert_fact(other_agent, deadline("2026-11-09", "x1", at(10, 20)))
    engine = canonical_issuer(policy.tenant_id)
    result = assert_fact(engine, deadline("2026-11-02", "r18", at(10, 20), expected_revision=1))
    assert result.outcome == Outcome.CREATED
    # A value the server fetched (verified_at) ranks 1 whoever issues it, and keeps ranking 1 as the head.
    fetched = assert_fact(
        other_agent,
        deadline("2026-11-03", "r19", at(10, 21), expected_revision=2),
        now=at(10, 21),
        verified_at=at(10, 21),
    )
    assert fetched.outcome == Outcome.CREATED
    later = assert_fact(other_agent, deadline("2026-11-20", "r20", at(10, 22), expected_revision=3))
    assert later.outcome == Outcome.HISTORY  # the same agent's unbacked claim does not edit the fetched value
    assert MemoryRecord.objects.get(is_head=True).value == "2026-11-03"


def test_a_ref_without_the_prefix_ranks_zero_even_from_the_named_source(agent, other_agent, policy):
    assert_fact(other_agent, deadline("2026-11-09", "x1", at(10, 20)))
    result = assert_fact(agent, deadline("2026-11-02", "1", at(10, 20), ref="chat:msg-1", expected_revision=1))
    assert result.outcome == Outcome.DISPUTED  # rank 0 against rank 0, unorderable: both kept
    assert TASK_REF.startswith(policy.canonical_ref_prefix)
