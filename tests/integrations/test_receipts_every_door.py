"""Every door that reads for acting gets a decision receipt from the one domain function (memory.receipts): MCP's
`recall` with purpose="action" and the Python client, answered and refused; the receipt is the reader's to fetch
and another agent's or tenant's token is refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from memory_governance import errors as client_errors

from memory_admin.accounts.services import issue_token
from memory_admin.lib import signing
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import DecisionReceipt
from tests.support import DEADLINE, deadline
from tests.support.canonical_source import deadline_policy_checked_before_action
from tests.support.client import Personas
from tests.support.mcp import FACT, data, over_http, run

SUBJECT = DEADLINE["subject_id"]
VALUE = "2026-11-02T17:00+09:00"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def blocking_policy(admin, source):
    return deadline_policy_checked_before_action(admin.tenant, source[0])


@pytest.fixture
def verified_before(agent, blocking_policy):
    past = timezone.now() - timedelta(days=3)
    return assert_fact(agent, deadline(VALUE, "r18", past), now=past, verified_at=past).record


def test_mcp_recall_for_action_carries_the_receipt_answered_and_refused(
    live_server, api, agent, other_agent, outsider, source, verified_before
):
    token = issue_token(agent)

    async def session() -> tuple[Any, Any]:
        async with over_http(live_server.url, token) as client:
            source[1].set(SUBJECT, value=VALUE, revision="r18")
            answered = await client.call_tool("recall", {**FACT, "purpose": "action"})
            source[1].set(SUBJECT, mode="error", status=503)
            refused = await client.call_tool("recall", {**FACT, "purpose": "action"})
            return answered, refused

    answered, refused = run(session)
    assert not answered.is_error and refused.is_error
    served_id, refused_id = data(answered)["receipt_id"], data(refused)["receipt_id"]
    assert data(refused)["code"] == "recheck_required"
    served = api(agent).get(f"/api/v1/receipts/{served_id}/").json()
    assert served["decision"] == "served" and served["served"]["memory_id"] == verified_before.memory_id
    assert served["disclosure"]["value"] == VALUE
    held = api(agent).get(f"/api/v1/receipts/{refused_id}/").json()
    assert held["decision"] == "refused" and held["refusal"]["recheck_outcome"] == "source_unavailable"
    for receipt in (served, held):
        assert signing.verify({k: v for k, v in receipt.items() if k != "disclosure"})
    assert [r.sequence for r in DecisionReceipt.objects.order_by("sequence")] == [1, 2]
    assert served["reader"]["name"] == "agent-7"
    for stranger in (other_agent, outsider):
        assert api(stranger).get(f"/api/v1/receipts/{served_id}/").status_code == 404


def test_the_python_client_gets_the_receipt_answered_and_refused(live_server, source, verified_before):
    personas = Personas(live_server.url)
    with personas.client("agent-7") as client, personas.client("agent-9") as other:
        source[1].set(SUBJECT, value=VALUE, revision="r18")
        fact = client.current(DEADLINE["project_id"], SUBJECT, DEADLINE["predicate"], purpose="action")
        receipt = client.receipt(fact["receipt_id"])
        assert receipt["served"]["revision"] == fact["revision"] and receipt["disclosure"]["value"] == fact["value"]

        source[1].set(SUBJECT, mode="error", status=503)
        with pytest.raises(client_errors.RecheckRequired) as caught:
            client.current(DEADLINE["project_id"], SUBJECT, DEADLINE["predicate"], purpose="action")
        refused_id = caught.value.receipt_id
        assert refused_id and client.receipt(refused_id)["refusal"]["code"] == "recheck_required"
        with pytest.raises(client_errors.NotFound):
            other.receipt(refused_id)
