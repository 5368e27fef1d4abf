"""The MCP server through the official SDK's own client: over Streamable HTTP against a live server, and over
stdio by spawning `manage.py mcp --token …` on the test database."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from deletion import service as deletion_service
from deletion.models import DeletionRequest
from memory_admin.accounts.services import issue_token
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.audit import Action
from memory_admin.memory.errors import InvalidInput
from memory_admin.memory.models import AuditEvent, FieldPolicy
from tests.support import DEADLINE, ROOT, deadline
from tests.support.canonical_source import http_json_source
from tests.support.celery_worker import _test_database_url
from tests.support.mcp import FACT, REMEMBER, TOOLS, data, over_http, over_stdio, run, summary


@pytest.fixture
def agent_token(agent) -> str:
    return issue_token(agent)


# --- Streamable HTTP ----------------------------------------------------------------------------------------


def test_search_memory_finds_what_remember_just_wrote_and_takes_filters(live_server, agent_token):
    """Remember, then recall by search in the same conversation: no worker embeds it first (read-your-writes). The
    new optional arguments narrow it; the summary ranks the hits and says how each was found."""
    room = {**REMEMBER, "subject_id": "sato", "predicate": "meeting_room", "value": "Room 3", "source_ref": "chat:1"}

    async def session() -> list[Any]:
        async with over_http(live_server.url, agent_token) as client:
            await client.call_tool("remember", REMEMBER)
            await client.call_tool("remember", room)
            return [
                await client.call_tool("search_memory", {"q": "submission deadline"}),
                await client.call_tool("search_memory", {"q": "deadline room", "subject_id": "sato"}),
                await client.call_tool("search_memory", {"q": "deadline room", "predicate": "submission_deadline"}),
                await client.call_tool("search_memory", {"q": "room", "project_id": "project-b"}),
                await client.call_tool("search_memory", {"q": "room", "subject_id": "../etc"}),
            ]

    found, by_subject, by_predicate, elsewhere, bad = run(session)
    hits = data(found)["results"]
    assert [(h["subject_id"], h["rank"], h["match"], h["score"]) for h in hits] == [
        ("task-proposal-017", 1, "keyword", None)
    ]
    assert "1. task-proposal-017.submission_deadline" in summary(found) and "keyword match" in summary(found)
    assert [h["subject_id"] for h in data(by_subject)["results"]] == ["sato"]
    assert [h["predicate"] for h in data(by_predicate)["results"]] == ["submission_deadline"]
    assert data(elsewhere)["results"] == []
    assert bad.is_error and data(bad)["code"] == "invalid" and "subject_id" in data(bad)["errors"]


def test_it_lists_the_tools_and_remembers_then_recalls_over_http(live_server, agent, agent_token):
    async def session() -> tuple[set[str], Any, Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            listed = await client.list_tools()
            remembered = await client.call_tool("remember", REMEMBER)
            recalled = await client.call_tool("recall", FACT)
            moved = {**REMEMBER, "value": "2026-11-02T17:00+09:00", "source_revision": "r18"}
            conflict = await client.call_tool("remember", moved)
            return {t.name for t in listed.tools}, remembered, recalled, conflict

    names, remembered, recalled, conflict = run(session)
    assert names == TOOLS
    assert not remembered.is_error and data(remembered)["outcome"] == "created"
    assert data(remembered)["revision"] == 1 and "expected_revision=1" in summary(remembered)
    fact = data(recalled)
    assert not recalled.is_error
    assert fact["value"] == "2026-10-30T17:00+09:00" and fact["memory_id"] == data(remembered)["memory_id"]
    assert fact["freshness"] == "never_verified" and fact["caveat"]
    assert "2026-10-30T17:00+09:00" in summary(recalled)
    # Changing a fact without the revision read is refused with what to do, never a silent overwrite.
    assert conflict.is_error and data(conflict)["code"] == "expected_revision_required"
    assert data(conflict)["current"]["revision"] == 1 and "expected_revision" in data(conflict)["next_step"]
    # Every call is audited with the agent as actor (the tool and its outcome, never the arguments).
    calls = AuditEvent.objects.filter(action=Action.MCP_TOOL_CALLED, actor=agent).order_by("id")
    assert [(e.object_id, (e.after or {})["outcome"]) for e in calls] == [
        ("remember", "ok"),
        ("recall", "ok"),
        ("remember", "expected_revision_required"),
    ]
    assert "2026-10-30" not in json.dumps([e.after for e in calls])


def test_a_supersession_leaves_a_pending_notice_for_what_was_recalled(live_server, agent, agent_token):
    async def session() -> tuple[Any, Any, Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            await client.call_tool("remember", REMEMBER)
            await client.call_tool("recall", {**FACT, "session_id": "chat-1"})
            before = await client.call_tool("pending_notices", {})
            moved = {**REMEMBER, "value": "2026-11-02T17:00+09:00", "source_revision": "r18", "expected_revision": 1}
            moved["valid_from"] = "2026-10-22T09:00:00+09:00"
            await client.call_tool("remember", moved)
            after = await client.call_tool("pending_notices", {})
            notice_id = data(after)["results"][0]["id"] if data(after)["results"] else "none"
            acked = await client.call_tool("acknowledge_notice", {"notice_id": notice_id})
            return before, after, acked, await client.call_tool("pending_notices", {})

    before, after, acked, finally_ = run(session)
    assert data(before)["results"] == []
    notices = data(after)["results"]
    assert len(notices) == 1 and notices[0]["session_id"] == "chat-1" and notices[0]["revision"] == 1
    assert notices[0]["current_memory_id"] and "recall" in summary(after)
    assert not acked.is_error and data(acked)["acknowledged_at"]
    assert data(finally_)["results"] == []


@pytest.fixture
def blocking_policy(admin, source):
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        canonical_source=http_json_source(source[0], timeout=0.5),
        recheck_interval=timedelta(days=1),
        recheck_before_action=True,
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        risk=FieldPolicy.Risk.HIGH,
    )


def test_recall_for_action_refuses_when_the_canonical_source_is_down(
    live_server, agent, agent_token, source, blocking_policy
):
    past = timezone.now() - timedelta(days=3)
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", past), now=past, verified_at=past)
    source[1].set(DEADLINE["subject_id"], mode="error", status=503)

    async def session() -> tuple[Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            return (
                await client.call_tool("recall", {**FACT, "purpose": "action"}),
                await client.call_tool("recall", FACT),
            )

    for_action, for_answer = run(session)
    assert for_action.is_error
    refused = data(for_action)
    assert refused["code"] == "recheck_required" and refused["recheck_outcome"] == "source_unavailable"
    assert refused["last_verified_value"] == "2026-11-02T17:00+09:00"
    assert refused["last_verified_at"] == past.isoformat()
    text = summary(for_action)
    assert text.startswith("DO NOT ACT.") and "2026-11-02T17:00+09:00" in text and past.isoformat() in text
    assert "could not be confirmed" in text
    assert source[1].hits[DEADLINE["subject_id"]] >= 1  # the server did try the source
    # Answering (not acting) still gives the value, with its caveat.
    assert not for_answer.is_error and data(for_answer)["action_allowed"] is False and data(for_answer)["caveat"]
    # The action read made the attempt ("just now"); the answer read made none and says when the last one failed.
    assert "could not be confirmed just now" in refused["caveat"], refused["caveat"]
    assert "the last attempt, at" in data(for_answer)["caveat"] and "just now" not in data(for_answer)["caveat"]


def test_another_tenants_token_sees_nothing(live_server, agent, outsider, moved_deadline):
    outsider_token = issue_token(outsider)
    memory_id = moved_deadline[1].record.memory_id

    async def session() -> list[Any]:
        async with over_http(live_server.url, outsider_token) as client:
            return [
                await client.call_tool("recall", FACT),
                await client.call_tool("recall_as_of", {**FACT, "known_at": "2026-10-21T12:00:00+09:00"}),
                await client.call_tool("history", {"memory_id": memory_id}),
                await client.call_tool("history", FACT),
                await client.call_tool("list_conflicts", {}),
                await client.call_tool("pending_notices", {}),
            ]

    recall, as_of, by_id, by_key, conflicts, notices = run(session)
    for refused in (recall, as_of, by_id, by_key):
        assert refused.is_error and data(refused)["code"] == "not_found"
        assert "2026-11-02" not in json.dumps(data(refused)) and "2026-10-30" not in json.dumps(data(refused))
    assert data(conflicts)["results"] == [] and data(notices)["results"] == []


def test_disagreeing_equal_sources_are_a_dispute_with_both_candidates_and_no_value(live_server, agent_token):
    async def session() -> tuple[Any, Any, Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            await client.call_tool("remember", REMEMBER)
            # The same source revision with another value: no rule orders them.
            disputed = await client.call_tool("remember", {**REMEMBER, "value": "2026-10-31T17:00+09:00"})
            return (
                disputed,
                await client.call_tool("list_conflicts", {}),
                await client.call_tool("recall", FACT),
                await client.call_tool("recall", {**FACT, "purpose": "action"}),
            )

    disputed, conflicts, for_answer, for_action = run(session)
    assert not disputed.is_error and data(disputed)["outcome"] == "disputed" and "do not pick" in summary(disputed)
    [dispute] = data(conflicts)["results"]
    assert {c["value"] for c in dispute["candidates"]} == {"2026-10-30T17:00+09:00", "2026-10-31T17:00+09:00"}
    fact = data(for_answer)
    assert fact["value"] is None and fact["status"] == "disputed" and len(fact["candidates"]) == 2
    assert "DISPUTED" in summary(for_answer) and dispute["id"] in summary(for_answer)
    assert for_action.is_error and data(for_action)["code"] == "fact_disputed"


def test_as_of_and_history_answer_the_moved_deadline(live_server, agent, agent_token, moved_deadline):
    async def session() -> tuple[Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            return (
                await client.call_tool("recall_as_of", {**FACT, "valid_at": "2026-10-21T12:00:00+09:00"}),
                await client.call_tool("history", FACT),
            )

    as_of, history = run(session)
    assert data(as_of)["value"] == "2026-10-30T17:00+09:00"
    assert [(r["revision"], r["status"]) for r in data(history)["results"]] == [(1, "superseded"), (2, "accepted")]


def test_request_forget_files_a_request_that_waits_for_compliance(
    live_server, agent, compliance, agent_token, moved_deadline
):
    async def session() -> tuple[Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            return (
                await client.call_tool(
                    "request_forget",
                    {"project_id": "project-a", "subject_id": DEADLINE["subject_id"], "reason": "user asked"},
                ),
                await client.call_tool("recall", FACT),
            )

    filed, still = run(session)
    assert not filed.is_error and data(filed)["state"] == "awaiting_approval"
    assert "Nothing is deleted" in summary(filed)
    assert not still.is_error and data(still)["value"] == "2026-11-02T17:00+09:00"  # an agent never deletes
    # A compliance person accepts it, through the same approval as any request awaiting one.
    approved = deletion_service.approve(compliance, data(filed)["id"])
    assert approved.state == DeletionRequest.State.ACCEPTED and approved.requested_by == agent


def test_request_forget_cuts_the_values_being_forgotten_out_of_the_reason(
    live_server, agent, agent_token, moved_deadline
):
    """An agent that quotes the value it asks to forget (issue 35, item 5): the reason is kept and audited without
    it, the answer says so, and the tool's description told it not to."""
    assert_fact(
        agent,
        deadline(
            {"contact": "Alice <alice@example.com>"}, "r19", moved_deadline[1].record.valid_from, expected_revision=2
        ),
    )

    async def session() -> tuple[Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            tools = await client.list_tools()
            filed = await client.call_tool(
                "request_forget",
                {
                    "project_id": "project-a",
                    "subject_id": DEADLINE["subject_id"],
                    "reason": "forget ALICE@example.com, deadline was 2026-10-30T17:00+09:00",
                },
            )
            return tools, filed

    tools, filed = run(session)
    described = next(t for t in tools.tools if t.name == "request_forget")
    assert "never quote the values" in " ".join((described.description or "").split())
    assert "do not quote" in json.dumps(described.input_schema)
    assert not filed.is_error
    answer = data(filed)
    assert answer["reason_redacted"] is True
    assert answer["reason"] == "forget [redacted], deadline was [redacted]"
    assert "cut out of your reason" in summary(filed)
    stored = DeletionRequest.objects.get(public_id=answer["id"])
    assert stored.reason == answer["reason"] and stored.reason_redacted
    event = AuditEvent.objects.get(object_id=stored.public_id, action=Action.DELETION_REQUESTED)
    assert "alice" not in event.reason.lower() and "2026-10-30" not in event.reason


def test_an_agent_cannot_ask_to_forget_a_whole_predicate(live_server, agent_token, moved_deadline):
    async def session() -> Any:
        async with over_http(live_server.url, agent_token) as client:
            return await client.call_tool(
                "request_forget",
                {"project_id": "project-a", "memory_ids": [], "reason": "x"},
            )

    refused = run(session)
    assert refused.is_error and data(refused)["code"] == "invalid"
    with pytest.raises(InvalidInput):
        deletion_service.propose_deletion(
            moved_deadline[1].record.issuer, project_id="project-a", scope={"predicate": "x"}, reason="x"
        )
    assert not DeletionRequest.objects.exists()


def test_bad_arguments_are_refused_with_the_fields_named(live_server, agent_token):
    async def session() -> Any:
        async with over_http(live_server.url, agent_token) as client:
            return await client.call_tool("remember", {**REMEMBER, "subject_id": "../etc", "valid_from": "yesterday"})

    refused = run(session)
    assert refused.is_error and data(refused)["code"] == "invalid"
    assert set(data(refused)["errors"]) == {"subject_id", "valid_from"}


@pytest.mark.parametrize("header", [None, "Bearer mga_not-a-real-token", "Basic abc"])
def test_no_or_a_bad_token_is_401(live_server, header):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if header:
        headers["Authorization"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(f"{live_server.url}/mcp/", json=body, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.json()["code"] in {"not_authenticated", "authentication_failed"}
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_get_is_refused_without_a_server_error(live_server, agent_token):
    headers = {"Authorization": f"Bearer {agent_token}", "Accept": "text/event-stream"}
    response = httpx.get(f"{live_server.url}/mcp/", headers=headers, timeout=10)
    assert response.status_code == 405 and response.headers["Allow"] == "POST"
    assert httpx.delete(f"{live_server.url}/mcp/", headers=headers, timeout=10).status_code == 405


def test_the_sdk_client_without_a_token_cannot_connect(live_server):
    async def session() -> None:
        async with over_http(live_server.url, None) as client:
            await client.list_tools()

    # What docs/integrations.md "MCP server" tells users the SDK shows for the 401: an MCPError inside exception groups.
    with pytest.raises(BaseExceptionGroup) as caught:
        run(session)

    def leaves(group: BaseException) -> list[BaseException]:
        inner = getattr(group, "exceptions", None)
        return [leaf for e in inner for leaf in leaves(e)] if inner else [group]

    assert any(
        type(e).__name__ == "MCPError" and "Server returned an error response" in str(e) for e in leaves(caught.value)
    ), leaves(caught.value)


# --- stdio --------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the spawned server reads the test database: rows must be committed
def test_stdio_lists_tools_and_remembers_then_recalls(agent):
    token = issue_token(agent)

    async def session() -> tuple[set[str], Any, Any]:
        async with over_stdio(token) as client:
            listed = await client.list_tools()
            remembered = await client.call_tool("remember", REMEMBER)
            return {t.name for t in listed.tools}, remembered, await client.call_tool("recall", FACT)

    names, remembered, recalled = run(session)
    assert names == TOOLS
    assert data(remembered)["outcome"] == "created"
    assert data(recalled)["value"] == "2026-10-30T17:00+09:00"
    calls = AuditEvent.objects.filter(action=Action.MCP_TOOL_CALLED, actor=agent)
    assert {(e.object_id, (e.after or {})["transport"]) for e in calls} == {("remember", "stdio"), ("recall", "stdio")}


@pytest.mark.django_db(transaction=True)
def test_stdio_answers_a_bad_line_with_a_parse_error_and_goes_on(agent):
    """Issue 30, item 7 over stdio: a key named twice, a byte that is not UTF-8 and a NUL escape are each answered
    with -32700 and the reason (the request's id when readable, never a value), and nothing is written; the
    session then goes on serving well-formed calls."""
    import subprocess

    token = issue_token(agent)
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "remember", "arguments": REMEMBER}}
    twice = json.dumps(call).replace('"predicate"', '"subject_id": "someone-else", "predicate"')
    nul = json.dumps({**call, "id": 6}).replace("r17", "r\\u0000")
    initialize = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    lines = [
        twice.encode(),
        b'{"jsonrpc": "2.0", "id": 8, "method": "\xff"}',
        nul.encode(),
        json.dumps(initialize).encode(),
    ]
    done = subprocess.run(
        [sys.executable, "manage.py", "mcp", "--token", token],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": _test_database_url()},
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=120,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    errors = {a["id"]: a["error"] for a in answers if "error" in a}
    assert errors[5]["code"] == -32700 and '"subject_id" twice' in errors[5]["message"], answers
    assert errors[None]["code"] == -32700 and "Not UTF-8" in errors[None]["message"]
    assert errors[6]["code"] == -32700 and "NUL" in errors[6]["message"]
    assert "someone-else" not in done.stdout.decode()
    # The well-formed initialize after them is served: the session was not ended by the bad lines.
    assert any(a.get("id") == 7 and "result" in a for a in answers), answers
    assert not AuditEvent.objects.filter(action=Action.MCP_TOOL_CALLED, actor=agent).exists()


def test_missing_or_mistyped_arguments_answer_in_the_products_shape(live_server, agent_token):
    """Issue 31: the SDK's own check of the input schema used to answer a text dump of pydantic's error."""

    async def session() -> tuple[Any, Any, Any]:
        async with over_http(live_server.url, agent_token) as client:
            missing = await client.call_tool("remember", {k: v for k, v in REMEMBER.items() if k != "source_ref"})
            mistyped = await client.call_tool("remember", {**REMEMBER, "expected_revision": "secret-abc"})
            null = await client.call_tool("remember", {**REMEMBER, "value": None})
            return missing, mistyped, null

    missing, mistyped, null = run(session)
    for refused, argument in ((missing, "source_ref"), (mistyped, "expected_revision"), (null, "value")):
        assert refused.is_error
        answer = data(refused)
        assert answer["code"] == "invalid" and argument in answer["errors"], answer
        assert argument in answer["detail"] and answer["next_step"]
        assert "secret-abc" not in json.dumps(answer) and "pydantic" not in summary(refused)


def test_remember_declares_the_json_types_of_value(live_server, agent_token):
    async def session() -> Any:
        async with over_http(live_server.url, agent_token) as client:
            return await client.list_tools()

    remember = next(t for t in run(session).tools if t.name == "remember")
    value = remember.input_schema["properties"]["value"]
    declared = {option.get("type") for option in value["anyOf"]}
    assert declared == {"string", "integer", "number", "boolean", "array", "object"}, value


def test_acknowledging_an_unknown_notice_says_where_the_ids_come_from(live_server, agent_token):
    async def session() -> Any:
        async with over_http(live_server.url, agent_token) as client:
            return await client.call_tool("acknowledge_notice", {"notice_id": "inv-does-not-exist"})

    refused = run(session)
    assert refused.is_error and data(refused)["code"] == "not_found"
    assert "pending_notices" in data(refused)["next_step"]
    assert "Nothing usable is recorded" not in summary(refused)


def test_a_throttled_call_answers_the_products_shape_with_retry_after_as_data(live_server, agent, settings):
    """Issue 31: the wait was only in prose. The result carries `retry_after` (whole seconds) and a next step, and
    the HTTP answer a Retry-After header (the JSON-RPC result stays a 200: see docs/integrations.md "MCP server")."""
    rates = dict(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"])
    rates = {scope: "100000/min" for scope in rates} | {"writes": "1/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    token = issue_token(agent)

    async def session() -> tuple[Any, Any]:
        async with over_http(live_server.url, token) as client:
            first = await client.call_tool("remember", REMEMBER)
            second = await client.call_tool("remember", {**REMEMBER, "subject_id": "task-proposal-018"})
            return first, second

    first, second = run(session)
    assert not first.is_error
    assert second.is_error
    answer = data(second)
    assert answer["code"] == "throttled" and 1 <= answer["retry_after"] <= 60
    assert "retry_after" in answer["next_step"] and "Next:" in summary(second)
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "remember", "arguments": REMEMBER}}
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    response = httpx.post(f"{live_server.url}/mcp/", json=call, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert response.json()["result"]["structuredContent"]["code"] == "throttled"
