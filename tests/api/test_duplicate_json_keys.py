"""A JSON body naming a key twice is refused with the key's name, before anything is written (issue 30, item 7).

Python's decoder keeps the last of two equal keys; a proxy, a WAF or an audit tool reading the same body may
keep the first, and would then see another subject (or value, or revision) than the one written."""

from __future__ import annotations

import json

import pytest

from memory_admin.lib.parsers import DuplicateKey, unique_keys
from memory_admin.memory.models import MemoryRecord
from tests.support import at, body, deadline


def _twice(data: dict, key: str, other: object) -> str:
    text = json.dumps(data)
    return text[:-1] + f", {json.dumps(key)}: {json.dumps(other)}" + "}"


def test_a_record_naming_a_key_twice_is_a_400_with_the_key(api, agent):
    raw = _twice(body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))), "subject_id", "someone-else")
    response = api(agent).generic("POST", "/api/v1/records/", raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "parse_error"
    assert '"subject_id" twice' in response.json()["detail"]
    assert not MemoryRecord.objects.exists()


def test_a_batch_item_naming_a_key_twice_refuses_the_whole_body(api, agent):
    item = json.dumps(body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))))
    nested = item[:-1] + ', "value": "2027-01-01"}'
    raw = '{"items": [' + nested + "]}"
    response = api(agent).generic("POST", "/api/v1/records/batch/", raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert '"value" twice' in response.json()["detail"]
    assert not MemoryRecord.objects.exists()


@pytest.mark.parametrize("text", ['{"a": 1, "a": 1}', '{"x": {"k": 1, "k": 2}}', '[{"a": 1}, {"b": 1, "b": 2}]'])
def test_the_hook_refuses_a_repeated_key_at_any_depth(text):
    with pytest.raises(DuplicateKey):
        json.loads(text, object_pairs_hook=unique_keys)
    assert json.loads('{"a": 1, "b": {"a": 2}}', object_pairs_hook=unique_keys) == {"a": 1, "b": {"a": 2}}


def _mcp_remember(arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "remember", "arguments": arguments}}


MCP_HEADERS = {"HTTP_ACCEPT": "application/json, text/event-stream", "HTTP_MCP_PROTOCOL_VERSION": "2025-06-18"}


def test_an_mcp_call_naming_an_argument_twice_is_a_parse_error_with_the_key(client, agent):
    from memory_admin.accounts.services import issue_token

    arguments = {
        "project_id": "project-a",
        "subject_id": "task-proposal-017",
        "predicate": "submission_deadline",
        "value": "2026-10-30T17:00+09:00",
        "source_ref": "task-system:project-a/task-proposal-017",
        "source_revision": "r17",
    }
    raw = json.dumps(_mcp_remember(arguments)).replace('"predicate"', '"subject_id": "someone-else", "predicate"')
    response = client.post(
        "/mcp/", raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {issue_token(agent)}", **MCP_HEADERS
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == -32700 and '"subject_id" twice' in error["message"]
    assert "someone-else" not in error["message"]
    assert not MemoryRecord.objects.exists()
