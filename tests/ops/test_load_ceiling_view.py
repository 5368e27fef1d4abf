"""The bench's ceiling view (bench/load.py) exists only when BENCH_CEILING_VIEW=1 enables it."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import clear_url_caches
from django.utils import timezone

import memory_admin.urls
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import DecisionReceipt, FieldPolicy
from tests.support import DEADLINE, deadline

URL = "/api/v1/bench/ceiling/"


@pytest.fixture
def urls_with(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    def load(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("BENCH_CEILING_VIEW", raising=False)
        else:
            monkeypatch.setenv("BENCH_CEILING_VIEW", value)
        importlib.reload(memory_admin.urls)
        clear_url_caches()

    yield load
    monkeypatch.delenv("BENCH_CEILING_VIEW", raising=False)
    importlib.reload(memory_admin.urls)
    clear_url_caches()


def test_the_ceiling_view_is_absent_by_default(api, agent, urls_with):
    urls_with(None)
    assert api(agent).get(URL).status_code == 404
    urls_with("0")
    assert api(agent).get(URL).status_code == 404


def test_the_ceiling_view_answers_with_the_api_authentication_when_enabled(api, agent, urls_with, client):
    urls_with("1")
    response = api(agent).get(URL)
    assert response.status_code == 200 and response.json()["status"] == "accepted"
    assert client.get(URL).status_code in (401, 403)  # no token: refused like any API view


# The statements of a read for acting's receipt: its savepoint, the tenant's receipt chain, the receipt itself.
RECEIPT_STATEMENT = re.compile(r"SAVEPOINT|memory_receiptchain|memory_decisionreceipt")


def test_a_read_for_action_on_a_fresh_value_costs_the_ceilings_queries_plus_the_record_and_its_policy(
    api, agent, urls_with
):
    """What bench/load.py compares: the action read adds two queries to the stack's own (authentication and the
    tenant context), the record and its field's policy, each read once; then it writes its decision receipt
    (memory.receipts, issue 35 item 3), counted apart: the receipt's statements, in a savepoint of their own."""
    FieldPolicy.objects.create(
        tenant=agent.tenant,
        predicate=DEADLINE["predicate"],
        recheck_interval=timedelta(days=1),
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
    )
    now = timezone.now()
    assert_fact(agent, deadline("2026-11-02", "r18", now - timedelta(hours=2)), verified_at=now - timedelta(hours=1))
    urls_with("1")
    client = api(agent)
    client.get(URL)  # the token's first use is stamped once; neither read below pays for it
    with CaptureQueriesContext(connection) as ceiling:
        assert client.get(URL).status_code == 200
    with CaptureQueriesContext(connection) as acting:
        response = client.get("/api/v1/facts/current/", {**DEADLINE, "purpose": "action"})
    assert response.status_code == 200 and response.json()["action_allowed"] is True
    statements = [q["sql"] for q in acting.captured_queries]
    receipt = [sql for sql in statements if RECEIPT_STATEMENT.search(sql)]
    reading = [sql for sql in statements if not RECEIPT_STATEMENT.search(sql)]
    assert len(reading) == len(ceiling.captured_queries) + 2, [sql[:80] for sql in reading]
    assert any("INSERT" in sql and "memory_decisionreceipt" in sql for sql in receipt), receipt
    assert DecisionReceipt.objects.filter(public_id=response.json()["receipt_id"]).exists()
