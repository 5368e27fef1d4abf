"""After a subject's deletion, what it held stays out (issue 30, items 4 and 5), through every door that writes a
fact: the API, the batch, `manage.py import`, MCP `remember`, the Python client and the LangGraph store.

- each deleted value of the subject is refused under any predicate and in any spelling that is the same value
  (case, Unicode NFKC, surrounding and repeated space), before the purge (the rule hiding the records) and after
  it, while the tombstones stay content-free (keyed hashes);
- a fact about the subject that claims to hold from before the deletion is refused (410 `tombstoned`, with the
  reason), and a new fact from after it is accepted; so are the same value for another subject, and values that
  carry no content of their own (booleans).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.core.management import CommandError, call_command
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from memory_governance import Client, Tombstoned
from memory_governance.langgraph_store import GovernedStore

from deletion.models import RefusedWrite, StoreProgress, Tombstone
from deletion.tasks import purge_store
from memory_admin.accounts.services import ensure_principal, issue_token
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import MemoryRecord

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = "project-a"
SUBJECT = "person-hanako"
EMAIL = "hanako@example.com"
CARD = {"email": EMAIL, "city": "Osaka"}
# The same e-mail in other spellings: upper case, full-width letters (NFKC), surrounding and repeated space.
FULL_WIDTH = "".join(chr(ord(c) + 0xFEE0) for c in EMAIL)  # the full-width forms, U+FF01-FF5E
SPELLINGS = ["HANAKO@Example.COM", FULL_WIDTH, f"  {EMAIL}\t"]


def now() -> datetime:
    return datetime.now(UTC)


def fact(subject: str, predicate: str, value: Any, *, valid_from: datetime, ref: str = "crm:people") -> Assertion:
    return Assertion(
        project_id=PROJECT,
        subject_id=subject,
        predicate=predicate,
        value=value,
        valid_from=valid_from,
        source_canonical_ref=ref,
        source_revision=valid_from.isoformat(),
    )


def api_body(subject: str, predicate: str, value: Any, valid_from: datetime) -> dict[str, Any]:
    return {
        "project_id": PROJECT,
        "subject_id": subject,
        "predicate": predicate,
        "value": value,
        "valid_from": valid_from.isoformat(),
        "source": {"canonical_ref": "crm:people-v2", "revision": valid_from.isoformat()},
    }


@pytest.fixture
def deleted_subject(request, agent, compliance, api) -> dict[str, Any]:
    """A subject with an e-mail, a contact card and a flag, deleted by compliance; purged unless the test is marked
    `pending` (then the rule hiding the records stands for their tombstones)."""
    written = now() - timedelta(days=3)
    for predicate, value in (("email", EMAIL), ("contact_card", CARD), ("newsletter", True)):
        assert_fact(agent, fact(SUBJECT, predicate, value, valid_from=written))
    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": PROJECT, "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202, response.content
    public_id = response.json()["id"]
    if request.node.get_closest_marker("pending") is None:
        for progress in StoreProgress.objects.filter(request__public_id=public_id):
            purge_store.apply(args=[progress.pk])
        assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT).exists()
    return {"request": public_id, "deleted_at": now()}


def later() -> datetime:
    return now() + timedelta(seconds=1)


# --- The rule, through the API --------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", [EMAIL, *SPELLINGS])
@pytest.mark.parametrize("purged", [True, pytest.param(False, marks=pytest.mark.pending)])
def test_a_deleted_value_is_refused_under_another_predicate_in_any_spelling(
    api, agent, deleted_subject, spelling, purged
):
    response = api(agent).post("/api/v1/records/", api_body(SUBJECT, "contact", spelling, later()), format="json")
    assert response.status_code == 410, response.content
    answer = response.json()
    assert answer["code"] == "tombstoned"
    assert "deleted with its subject" in answer["detail"] and deleted_subject["request"] in answer["detail"]
    assert RefusedWrite.objects.filter(path="assert_fact").count() == 1
    assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT, predicate="contact").exists()


@pytest.mark.parametrize("purged", [True, pytest.param(False, marks=pytest.mark.pending)])
def test_a_structured_value_is_refused_with_its_keys_in_another_case_and_order(api, agent, deleted_subject, purged):
    card = {"City": " osaka ", "EMAIL": EMAIL.upper()}
    response = api(agent).post("/api/v1/records/", api_body(SUBJECT, "card2", card, later()), format="json")
    assert response.status_code == 410, response.content


def test_what_is_not_a_deleted_value_of_that_subject_is_accepted(api, agent, deleted_subject):
    client = api(agent)
    # The same e-mail for another subject, a new e-mail for the deleted one, and a flag (no content of its own).
    for subject, predicate, value in (
        ("person-taro", "email", EMAIL),
        (SUBJECT, "email", "hanako.new@example.com"),
        (SUBJECT, "newsletter_opt_in", True),
        (SUBJECT, "contact", "hanako@example.co"),
    ):
        response = client.post("/api/v1/records/", api_body(subject, predicate, value, later()), format="json")
        assert response.status_code == 201, (subject, predicate, response.content)


def test_the_tombstones_hold_no_value(deleted_subject):
    stones = list(Tombstone.objects.filter(request__public_id=deleted_subject["request"]))
    assert sum(1 for s in stones if s.subject_value_hash) == 2  # the e-mail and the card; not the flag
    dumped = json.dumps([[getattr(s, f.attname) for f in Tombstone._meta.concrete_fields] for s in stones], default=str)
    for needle in ("hanako", "example", "Osaka", SUBJECT):
        assert needle.lower() not in dumped.lower()


@pytest.mark.parametrize("purged", [True, pytest.param(False, marks=pytest.mark.pending)])
def test_a_new_fact_backdated_before_the_deletion_is_refused_and_one_after_it_accepted(
    api, agent, deleted_subject, purged
):
    client = api(agent)
    backdated = deleted_subject["deleted_at"] - timedelta(hours=1)
    response = client.post("/api/v1/records/", api_body(SUBJECT, "phone", "+81-90-0000", backdated), format="json")
    assert response.status_code == 410, response.content
    assert response.json()["code"] == "tombstoned"
    assert "valid from before the subject's deletion" in response.json()["detail"]
    response = client.post("/api/v1/records/", api_body(SUBJECT, "phone", "+81-90-0000", later()), format="json")
    assert response.status_code == 201, response.content


# --- Every other door --------------------------------------------------------------------------------------------


def test_the_batch_refuses_them_item_by_item(api, agent, deleted_subject):
    items = [
        api_body(SUBJECT, "contact", SPELLINGS[0], later()),
        api_body(SUBJECT, "phone", "+81-90-1111", deleted_subject["deleted_at"] - timedelta(days=1)),
        api_body(SUBJECT, "phone", "+81-90-1111", later()),
    ]
    response = api(agent).post("/api/v1/records/batch/", {"items": items}, format="json")
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [(r["status"], r["outcome"]) for r in results] == [
        (410, "tombstoned"),
        (410, "tombstoned"),
        (201, "created"),
    ]


def test_the_import_refuses_them_by_line(agent, deleted_subject, tmp_path: Path):
    lines = [
        api_body(SUBJECT, "contact", SPELLINGS[1], later()),
        api_body(SUBJECT, "phone", "+81-90-2222", deleted_subject["deleted_at"] - timedelta(days=1)),
        api_body(SUBJECT, "phone", "+81-90-2222", later()),
    ]
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="2 line"):
        call_command(
            "import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=out, stderr=err
        )
    assert "created: 1" in out.getvalue() and "tombstoned: 2" in out.getvalue(), out.getvalue()
    assert "line 1" in err.getvalue() and "line 2" in err.getvalue()
    assert "hanako" not in err.getvalue().lower()


def test_the_client_raises_tombstoned(live_server, agent, deleted_subject):
    with Client(live_server.url, issue_token(agent)) as client:
        with pytest.raises(Tombstoned) as caught:
            client.assert_fact(
                PROJECT, SUBJECT, "contact", SPELLINGS[0], valid_from=later(), source_ref="crm:v2", source_revision="1"
            )
        assert "deleted with its subject" in str(caught.value)
        with pytest.raises(Tombstoned):
            client.assert_fact(
                PROJECT,
                SUBJECT,
                "phone",
                "+81-90-3333",
                valid_from=deleted_subject["deleted_at"] - timedelta(days=1),
                source_ref="crm:v2",
                source_revision="2",
            )


def test_the_store_refuses_a_card_put_back_under_another_key(live_server, agent, deleted_subject):
    store = GovernedStore(live_server.url, issue_token(agent), project_id=PROJECT)
    with pytest.raises(Tombstoned):
        store.put(("memories", SUBJECT), "card_copy", {"email": EMAIL.upper(), "city": "OSAKA"})
    assert store.get(("memories", SUBJECT), "card_copy") is None


def test_mcp_remember_refuses_it_in_the_products_shape(live_server, agent, deleted_subject):
    token = issue_token(ensure_principal("acme", "agent-7", ["agent"]))

    async def session() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            async with McpClient(streamable_http_client(f"{live_server.url}/mcp/", http_client=http)) as client:
                return await client.call_tool(
                    "remember",
                    {
                        "project_id": PROJECT,
                        "subject_id": SUBJECT,
                        "predicate": "contact",
                        "value": SPELLINGS[2],
                        "source_ref": "crm:v2",
                        "source_revision": "1",
                        "valid_from": later().isoformat(),
                    },
                )

    result = asyncio.run(session())
    assert result.is_error
    assert result.structured_content is not None and result.structured_content["code"] == "tombstoned"
