"""First calls that succeed (issue 31): one record shape in every door, with the flat source names the client and
MCP use accepted as an alias of the contract's nested `source`, and `valid_from` defaulting to the time of the
request everywhere (`POST /records/`, batch items, import lines, the client, MCP)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from memory_governance import AsyncClient, BatchNotApplied, Client, fact_body

from memory_admin.accounts.services import issue_token
from memory_admin.memory.models import MemoryRecord


def nested(subject: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {
        "project_id": "project-b",
        "subject_id": subject,
        "predicate": "owner",
        "value": value,
        "source": {"canonical_ref": f"crm:{subject}", "revision": "1"},
        **extra,
    }


def flat(subject: str, value: Any, **extra: Any) -> dict[str, Any]:
    body = nested(subject, value, **extra)
    source = body.pop("source")
    return {**body, "source_ref": source["canonical_ref"], "source_revision": source["revision"]}


def _valid_from(answer: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(answer["valid_from"].replace("Z", "+00:00"))


@pytest.mark.parametrize("shape", [nested, flat])
def test_a_record_without_valid_from_holds_from_the_request_in_either_source_shape(api, agent, shape):
    before = datetime.now(UTC)
    response = api(agent).post("/api/v1/records/", shape("acct-1", "alice"), format="json")
    assert response.status_code == 201, response.content
    answer = response.json()
    assert before - timedelta(seconds=1) <= _valid_from(answer) <= datetime.now(UTC)
    assert answer["source"]["canonical_ref"] == "crm:acct-1" and answer["source"]["revision"] == "1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**nested("acct-1", "a"), "source_ref": "crm:x", "source_revision": "2"}, "source"),
        ({**flat("acct-1", "a"), "source_revision": ""}, "source_revision"),
        ({k: v for k, v in flat("acct-1", "a").items() if k != "source_revision"}, "source_revision"),
        ({k: v for k, v in nested("acct-1", "a").items() if k != "source"}, "source"),
    ],
    ids=["both-forms", "blank-flat-revision", "half-flat", "no-source"],
)
def test_a_source_given_twice_or_half_is_refused_with_the_field(api, agent, body, field):
    response = api(agent).post("/api/v1/records/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert not MemoryRecord.objects.exists()


def test_a_batch_mixes_both_shapes_and_defaults_valid_from(api, agent):
    items = [nested("acct-1", "a"), flat("acct-2", "b"), flat("acct-3", "c", valid_from="2026-10-20T09:00:00+09:00")]
    response = api(agent).post("/api/v1/records/batch/", {"items": items}, format="json")
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["outcome"] for r in results] == ["created", "created", "created"]
    assert results[2]["record"]["valid_from"].startswith("2026-10-20T00:00:00")


def test_one_jsonl_in_both_source_shapes_imports_without_valid_from(agent, tmp_path: Path):
    lines = [nested("acct-1", "a"), flat("acct-2", "b"), nested("acct-3", "c"), flat("acct-4", "d")]
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = StringIO()
    call_command("import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=out)
    assert "created: 4" in out.getvalue(), out.getvalue()
    # The ref is sealed (lib.sealing): matched after reading, among the records of its clear system.
    crm = MemoryRecord.objects.filter(source_system="crm")
    assert [r.source_canonical_ref for r in crm].count("crm:acct-2") == 1


def test_an_import_line_with_both_source_shapes_is_refused_by_number(agent, tmp_path: Path):
    both = {**nested("acct-1", "a"), "source_ref": "crm:other", "source_revision": "9"}
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps(both) + "\n" + json.dumps(flat("acct-2", "b")) + "\n", encoding="utf-8")
    err = StringIO()
    with pytest.raises(CommandError, match="1 line"):
        call_command(
            "import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=StringIO(), stderr=err
        )
    assert "line 1: invalid (400)" in err.getvalue() and "source" in err.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_clients_first_calls_succeed_with_defaults(live_server, agent):
    token = issue_token(agent)
    with Client(live_server.url, token) as client:
        first = client.assert_fact(
            "project-b", "acct-1", "owner", "alice", source_ref="crm:acct-1", source_revision="1"
        )
        assert first["outcome"] == "created" and first["valid_from"]
        batch = client.assert_facts(
            [
                fact_body("project-b", "acct-2", "owner", "bob", source_ref="crm:acct-2", source_revision="1"),
                flat("acct-3", "carol"),
                fact_body("project-b", "bad/id", "owner", "x", source_ref="crm:x", source_revision="1"),
            ]
        )
        assert [r["outcome"] for r in batch["results"]] == ["created", "created", "invalid"]
        assert batch["results"][2]["error"]["code"] == "invalid" and batch["applied"]
        with pytest.raises(BatchNotApplied) as caught:
            client.assert_facts([flat("acct-4", "dan"), flat("bad/id", "x")], atomic=True)
        assert caught.value.status == 422 and caught.value.failed == [1]
    assert not MemoryRecord.objects.filter(subject_id="acct-4").exists()

    async def run() -> Any:
        async with AsyncClient(live_server.url, token) as client:
            return await client.assert_facts([flat("acct-5", "eve")])

    import asyncio

    assert asyncio.run(run())["results"][0]["outcome"] == "created"
