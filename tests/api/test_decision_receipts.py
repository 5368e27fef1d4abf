"""Decision receipts (issue 35, item 3): every read for acting, answered (200) or refused (409), carries a
`receipt_id`; the receipt is signed, chained per tenant, readable by the agent that read, owners and compliance
(404 for anyone else), verifies offline, and keeps verifying after a deletion erased the value it served."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from memory_admin.lib import signing
from memory_admin.memory import receipts
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import DecisionReceipt
from tests.support import DEADLINE, at, deadline, run_purge
from tests.support.canonical_source import deadline_policy_checked_before_action
from tests.support.trust import verify_offline

SUBJECT = DEADLINE["subject_id"]
ACTION = {**DEADLINE, "purpose": "action"}
VALUE = "2026-11-02T17:00+09:00"


@pytest.fixture
def policy(admin, source):
    return deadline_policy_checked_before_action(admin.tenant, source[0], authorized_issuers=["agent-7", "olivia"])


@pytest.fixture
def record(agent, policy):
    past = timezone.now() - timedelta(days=3)
    return assert_fact(
        agent, deadline(VALUE, "r18", past, ref="task-system:project-a/task-proposal-017"), now=past, verified_at=past
    ).record


def signed_part(document: dict) -> dict:
    return {key: value for key, value in document.items() if key != "disclosure"}


def test_an_answered_action_read_has_a_signed_receipt_of_what_it_served(api, agent, record, source):
    source[1].set(SUBJECT, value=VALUE, revision="r18")
    response = api(agent).get("/api/v1/facts/current/", ACTION)
    assert response.status_code == 200, response.json()
    receipt_id = response.json()["receipt_id"]

    fetched = api(agent).get(f"/api/v1/receipts/{receipt_id}/")
    assert fetched.status_code == 200, fetched.json()
    receipt = fetched.json()
    assert receipt["receipt_id"] == receipt_id and receipt["decision"] == "served"
    assert receipt["reader"] == {"name": "agent-7", "kind": "agent"}
    assert receipt["fact"]["subject_id"] == SUBJECT and receipt["fact"]["predicate"] == DEADLINE["predicate"]
    assert receipt["served"]["memory_id"] == record.memory_id and receipt["served"]["revision"] == record.revision
    assert receipt["disclosure"]["value"] == VALUE
    assert receipt["value_commitment"] == receipts.value_commitment(VALUE, receipt["disclosure"]["nonce"])
    # Freshness, the policy in force and the verification this read made.
    assert receipt["freshness"]["state"] == "fresh" and receipt["freshness"]["max_age_seconds"] == 86400
    assert receipt["freshness"]["age_seconds"] is not None and receipt["freshness"]["checked_at"]
    assert receipt["policy"]["on_failure"] == "block_action" and len(receipt["policy"]["version"]) == 16
    assert receipt["verification"]["recheck"]["outcome"] == "verified_unchanged"
    assert receipt["verification"]["recheck"]["source_revision"] == "r18"
    assert signing.verify(signed_part(receipt)) == receipt["key_id"]


def test_a_refused_action_read_has_a_receipt_of_the_refusal(api, agent, record, source):
    source[1].set(SUBJECT, mode="error", status=503)
    response = api(agent).get("/api/v1/facts/current/", ACTION)
    assert response.status_code == 409
    refused = response.json()
    assert refused["code"] == "recheck_required" and refused["receipt_id"]
    receipt = api(agent).get(f"/api/v1/receipts/{refused['receipt_id']}/").json()
    assert receipt["decision"] == "refused" and receipt["served"] is None and receipt["disclosure"] is None
    assert receipt["refusal"]["code"] == "recheck_required"
    assert receipt["refusal"]["memory_id"] == record.memory_id
    assert receipt["refusal"]["recheck_outcome"] == "source_unavailable"
    assert receipt["value_commitment"] is None
    # The refusal's caveat quotes the last verified value: the receipt does not.
    assert VALUE not in str(receipt)
    assert signing.verify(signed_part(receipt))


def test_a_disputed_fact_refused_for_action_has_a_receipt(api, agent, other_agent):
    price: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}
    for who, value, ref in ((agent, 1200, "vendor:x"), (other_agent, 1350, "partner:x")):
        assert_fact(
            who, Assertion(**price, value=value, valid_from=at(10, 26), source_canonical_ref=ref, source_revision="a")
        )
    response = api(agent).get("/api/v1/facts/current/", {**price, "purpose": "action"})
    assert response.status_code == 409 and response.json()["code"] == "fact_disputed"
    receipt = DecisionReceipt.objects.get(public_id=response.json()["receipt_id"])
    assert receipt.outcome == "fact_disputed"
    assert receipt.document["refusal"]["dispute_id"] == response.json()["dispute_id"]


def test_answers_not_for_acting_carry_no_receipt(api, agent, record):
    response = api(agent).get("/api/v1/facts/current/", DEADLINE)
    assert response.status_code == 200 and "receipt_id" not in response.json()
    assert not DecisionReceipt.objects.exists()


def test_the_reader_owners_and_compliance_read_a_receipt_and_nobody_else(
    api, agent, other_agent, owner, compliance, admin, outsider, record, source
):
    source[1].set(SUBJECT, value=VALUE, revision="r18")
    receipt_id = api(agent).get("/api/v1/facts/current/", ACTION).json()["receipt_id"]
    path = f"/api/v1/receipts/{receipt_id}/"
    for reader in (agent, owner, compliance):
        assert api(reader).get(path).status_code == 200
    for stranger in (other_agent, admin, outsider):
        answer = api(stranger).get(path)
        assert answer.status_code == 404 and answer.json()["code"] == "not_found"
    assert api(agent).get("/api/v1/receipts/rcp-unknown/").status_code == 404
    assert api(agent).get("/api/v1/receipts/rcp.bad'x/").status_code == 404  # not an id's form: no lookup
    assert api(agent).get("/api/v1/receipts/rcp%0Abad/").status_code == 400  # a control character


def test_receipts_are_chained_per_tenant_and_a_changed_one_breaks_the_chain(api, agent, record, source):
    source[1].set(SUBJECT, value=VALUE, revision="r18")
    ids = [api(agent).get("/api/v1/facts/current/", ACTION).json()["receipt_id"] for _ in range(3)]
    chain = list(DecisionReceipt.objects.filter(public_id__in=ids).order_by("sequence"))
    assert [r.sequence for r in chain] == [1, 2, 3]
    assert chain[0].document["prev_hash"] == ""
    assert [r.document["prev_hash"] for r in chain[1:]] == [r.hash for r in chain[:2]]
    assert receipts.verify_chain(agent.tenant_id) is None
    # The database's owner rewrites the second receipt's time: its hash no longer holds.
    document = {**chain[1].document, "at": "2026-01-01T00:00:00+00:00"}
    DecisionReceipt.objects.filter(pk=chain[1].pk).update(document=document)
    assert receipts.verify_chain(agent.tenant_id) == 2


def test_a_receipt_verifies_offline_and_fails_when_its_value_or_content_changes(api, agent, record, source, tmp_path):
    source[1].set(SUBJECT, value=VALUE, revision="r18")
    receipt_id = api(agent).get("/api/v1/facts/current/", ACTION).json()["receipt_id"]
    receipt = api(agent).get(f"/api/v1/receipts/{receipt_id}/").json()
    intact = verify_offline(tmp_path, receipt)
    assert intact.returncode == 0, intact.stderr
    assert "disclosed value matches" in intact.stdout

    other_value = {**receipt, "disclosure": {**receipt["disclosure"], "value": "2026-11-03T17:00+09:00"}}
    changed = verify_offline(tmp_path, other_value)
    assert changed.returncode == 1 and "value_commitment" in changed.stderr
    later = {**receipt, "served": {**receipt["served"], "revision": receipt["served"]["revision"] + 1}}
    assert verify_offline(tmp_path, later).returncode == 1


def test_a_deletion_erases_the_value_from_receipts_and_they_still_verify(
    api, agent, compliance, record, source, tmp_path
):
    source[1].set(SUBJECT, value=VALUE, revision="r18")
    receipt_id = api(agent).get("/api/v1/facts/current/", ACTION).json()["receipt_id"]
    filed = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
        format="json",
    )
    assert filed.status_code == 202
    # Erased at acceptance: the receipts endpoint no longer answers the value.
    assert api(agent).get(f"/api/v1/receipts/{receipt_id}/").json()["disclosure"] is None
    from deletion.models import DeletionRequest

    request = DeletionRequest.objects.get(public_id=filed.json()["id"])
    run_purge(request)
    request.refresh_from_db()
    assert request.state == DeletionRequest.State.PURGE_CONFIRMED
    progress = request.stores.get(store="receipts")
    assert (progress.state, progress.found, progress.hidden, progress.remaining) == ("verified", 1, 1, 0)
    assert progress.evidence["receipts_kept_value_free"] == 1

    receipt = api(agent).get(f"/api/v1/receipts/{receipt_id}/").json()
    assert VALUE not in str(receipt)
    erased = verify_offline(tmp_path, receipt)
    assert erased.returncode == 0, erased.stderr
    assert "erased by a deletion" in erased.stdout
    assert receipts.verify_chain(agent.tenant_id) is None
