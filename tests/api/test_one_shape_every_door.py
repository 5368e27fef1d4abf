"""One record shape through every door (issue 31): the same JSONL lines, with the source nested as the API contract
names it or flat as the client and MCP name it, and with Japanese subjects and predicates, are written through
`POST /records/`, `POST /records/batch/`, `manage.py import`, the Python client (`assert_fact(**line)` and
`assert_facts`), MCP's `remember` and the LangGraph store, and each door's facts read back the same: the value, the
source, and the identifiers exactly as written."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.core.management import call_command
from mcp import Client as MCPClient
from mcp.client.streamable_http import streamable_http_client
from memory_governance import Client
from memory_governance.langgraph_store import GovernedStore

from memory_admin.accounts.services import issue_token
from memory_admin.memory.models import MemoryRecord

pytestmark = pytest.mark.django_db(transaction=True)

# What an import file written from the product's own words looks like: both source forms, no valid_from on some.
JSONL = """\
{"project_id": "P", "subject_id": "佐藤 花子", "predicate": "提出期限", "value": "2026-11-02T17:00+09:00", "source": {"canonical_ref": "task-system:案件-017", "revision": "r18"}}
{"project_id": "P", "subject_id": "株式会社あおば出版", "predicate": "契約プラン", "value": {"plan": "スタンダード", "seats": 12}, "source_ref": "crm:あおば", "source_revision": "7"}
{"project_id": "P", "subject_id": "task-proposal-017", "predicate": "submission_deadline", "value": "2026-11-02T17:00+09:00", "source_ref": "task-system:project-a/task-proposal-017", "source_revision": "r18", "valid_from": "2026-10-22T09:00:00+09:00"}
{"project_id": "P", "subject_id": "佐藤 花子", "predicate": "送信許可", "value": false, "source": {"canonical_ref": "iam:佐藤", "revision": "3"}}
"""


def lines(project: str) -> list[dict[str, Any]]:
    return [{**json.loads(line), "project_id": project} for line in JSONL.splitlines()]


def _source(line: dict[str, Any]) -> tuple[str, str]:
    if "source" in line:
        return line["source"]["canonical_ref"], line["source"]["revision"]
    return line["source_ref"], line["source_revision"]


def read_back(api: Callable[..., Any], agent: Any, project: str, *, with_source: bool = True) -> None:
    """Each line's fact as `GET /facts/current/` answers it: the value, the source, the identifiers unchanged."""
    client = api(agent)
    for line in lines(project):
        query = {k: line[k] for k in ("project_id", "subject_id", "predicate")}
        response = client.get("/api/v1/facts/current/", query)
        assert response.status_code == 200, (query, response.content)
        fact = response.json()
        assert (fact["subject_id"], fact["predicate"]) == (line["subject_id"], line["predicate"])
        assert fact["value"] == line["value"]
        if with_source:
            assert (fact["source"]["canonical_ref"], fact["source"]["revision"]) == _source(line)
        # The answer is UTF-8 JSON: the names are shown as written, never escaped to ASCII.
        assert line["subject_id"].encode() in response.content
    assert MemoryRecord.objects.filter(project__key=project).count() == len(JSONL.splitlines())


def test_the_api_takes_each_line_as_its_body(api, agent):
    for line in lines("door-api"):
        response = api(agent).post("/api/v1/records/", line, format="json")
        assert response.status_code == 201, response.content
    read_back(api, agent, "door-api")


def test_the_batch_takes_the_lines_as_its_items(api, agent):
    response = api(agent).post("/api/v1/records/batch/", {"items": lines("door-batch")}, format="json")
    assert response.status_code == 200, response.content
    assert [r["outcome"] for r in response.json()["results"]] == ["created"] * 4
    read_back(api, agent, "door-batch")


def test_the_import_command_takes_the_file(api, agent, tmp_path: Path):
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines("door-import")), "utf-8")
    out = StringIO()
    call_command("import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=out)
    assert "created: 4" in out.getvalue(), out.getvalue()
    read_back(api, agent, "door-import")


def test_the_client_takes_each_line_as_keyword_arguments_and_all_of_them_as_a_batch(live_server, api, agent):
    with Client(live_server.url, issue_token(agent)) as client:
        for line in lines("door-client"):
            assert client.assert_fact(**line)["outcome"] == "created"
        batch = client.assert_facts(lines("door-client-batch"))
        assert [r["outcome"] for r in batch["results"]] == ["created"] * 4
        one = lines("door-client")[0]
        assert client.current(one["project_id"], one["subject_id"], one["predicate"])["subject_id"] == "佐藤 花子"
    read_back(api, agent, "door-client")
    read_back(api, agent, "door-client-batch")


def test_mcp_remember_takes_each_line_as_its_arguments(live_server, api, agent):
    headers = {"Authorization": f"Bearer {issue_token(agent)}"}

    async def session() -> list[Any]:
        answers = []
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with MCPClient(streamable_http_client(f"{live_server.url}/mcp/", http_client=http)) as mcp:
                for line in lines("door-mcp"):
                    answers.append(await mcp.call_tool("remember", line))
                one = {k: lines("door-mcp")[1][k] for k in ("project_id", "subject_id", "predicate")}
                answers.append(await mcp.call_tool("recall", one))
        return answers

    *remembered, recalled = asyncio.run(session())
    for answer in remembered:
        assert not answer.is_error, answer.content
        assert answer.structured_content["outcome"] == "created"
    assert recalled.structured_content["value"] == {"plan": "スタンダード", "seats": 12}
    assert "株式会社あおば出版" in recalled.content[0].text  # the summary names the subject as written
    read_back(api, agent, "door-mcp")


def test_the_langgraph_store_puts_each_line_under_its_subject(live_server, api, agent):
    store = GovernedStore(live_server.url, issue_token(agent), project_id="door-store")
    for line in lines("door-store"):
        value = line["value"] if isinstance(line["value"], dict) else {"value": line["value"]}
        store.put(("memories", line["subject_id"]), line["predicate"], value)
    item = store.get(("memories", "佐藤 花子"), "提出期限")
    assert item is not None and item.value["value"] == "2026-11-02T17:00+09:00"
    assert item.namespace == ("memories", "佐藤 花子") and item.key == "提出期限"
    assert MemoryRecord.objects.filter(project__key="door-store").count() == 4
