"""The Python client (integrations/python, `memory_governance`) over real HTTP against a live server of this
project: every method once (sync and async), each error code mapped to its exception from a real answer,
no retry on 409/428 (requests counted by the server), retries on 503 (a loopback stub that answers 503), and
the typed results checked against the live OpenAPI schema."""

from __future__ import annotations

import asyncio
import json
import threading
import typing
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.signals import request_started
from memory_governance import (
    AsyncClient,
    BaseNotCurrent,
    Client,
    ExpectedRevisionRequired,
    InvalidInput,
    InvalidState,
    IssuerNotAuthorized,
    NotFound,
    RecheckRequired,
    RetryPolicy,
    RevisionConflict,
    ServiceUnavailable,
    Tombstoned,
)
from memory_governance import types as t
from memory_governance._core import Call
from memory_governance.errors import AuthenticationFailed, Forbidden

from memory_admin.memory import policies
from memory_admin.memory.actions import Assertion, assert_fact
from tests.support.client import Personas

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = "project-a"
DEADLINE: dict[str, Any] = {
    "project_id": PROJECT,
    "subject_id": "task-proposal-017",
    "predicate": "submission_deadline",
}
REF = "task-system:project-a/task-proposal-017"


def now() -> datetime:
    return datetime.now(UTC)


# --- Personas with tokens, and the server's request count ---------------------------------------------


@pytest.fixture
def personas(live_server: Any) -> Personas:
    return Personas(live_server.url)


@pytest.fixture
def agent_client(personas: Personas) -> Iterator[Client]:
    with personas.client("agent-7") as client:
        yield client


@pytest.fixture
def server_requests() -> Iterator[list[str]]:
    """Every request the live server starts handling, counted on the server's side (Django's signal)."""
    seen: list[str] = []

    def count(sender: Any, environ: dict[str, Any], **kwargs: Any) -> None:
        seen.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}")

    request_started.connect(count, weak=False)
    try:
        yield seen
    finally:
        request_started.disconnect(count)


def first_deadline(client: Client, value: str = "2026-10-30T17:00+09:00") -> t.AssertResult:
    return client.assert_fact(
        **DEADLINE,
        value=value,
        valid_from=datetime(2026, 10, 20, tzinfo=UTC),
        source_ref=REF,
        source_revision="r17",
    )


def move_deadline(
    client: Client, expected: int, value: str = "2026-11-02T17:00+09:00", revision: int = 18
) -> t.AssertResult:
    """The task system moves the deadline (a newer source revision, later in valid time)."""
    return client.assert_fact(
        **DEADLINE,
        value=value,
        valid_from=datetime(2026, 10, 4 + revision, tzinfo=UTC),
        source_ref=REF,
        source_revision=f"r{revision}",
        expected_revision=expected,
    )


# --- Every method once ---------------------------------------------------------------------------------


def test_every_method_of_the_sync_client_over_http(personas: Personas) -> None:
    agent = personas.client("agent-7")
    owner = personas.client("olivia", "owner")
    compliance = personas.client("carl", "compliance")

    first = first_deadline(agent)
    assert first["outcome"] == "created" and first["revision"] == 1 and first["status"] == "accepted"

    fact = agent.current(**DEADLINE)
    assert fact["value"] == "2026-10-30T17:00+09:00" and fact["memory_id"] == first["memory_id"]
    assert fact["freshness"] == "never_verified" and fact["action_allowed"] is True
    as_of = agent.current(**DEADLINE, valid_at=datetime(2026, 10, 21, tzinfo=UTC))
    assert as_of["memory_id"] == first["memory_id"]

    load = agent.load_context(
        "session-1", [{"memory_id": first["memory_id"], "revision": 1}], now() + timedelta(hours=1)
    )
    assert load["agent_id"] == "agent-7" and load["memories"] == [{"memory_id": first["memory_id"], "revision": 1}]
    summary = agent.create_summary(PROJECT, "Due Oct 30.", [{"memory_id": first["memory_id"], "revision": 1}])
    planned = agent.create_scheduled_action(
        PROJECT,
        "reminder",
        {"to": "team"},
        now() + timedelta(days=3),
        [{"memory_id": first["memory_id"], "revision": 1}],
    )

    second = move_deadline(agent, expected=1)
    assert second["outcome"] == "created" and second["revision"] == 2

    assert agent.record(first["memory_id"])["status"] == "superseded"
    chain = agent.history(second["memory_id"])["results"]
    assert [r["revision"] for r in chain] == [1, 2]
    listed = list(agent.records(project_id=PROJECT, subject_id=DEADLINE["subject_id"], page_size=1))
    assert sorted(r["revision"] for r in listed) == [1, 2]  # two cursor pages followed

    notices = agent.notices("agent-7")
    assert [n["memory_id"] for n in notices] == [first["memory_id"]]
    acked = agent.ack("agent-7", notices[0]["id"])
    assert acked["acknowledged_at"] is not None and agent.notices("agent-7") == []
    assert agent.summary(summary["id"])["status"] == "stale"  # its base changed (regeneration waits for a worker)
    assert agent.scheduled_action(planned["id"])["status"] == "suspended"

    # Searched right after the writes (their vector entries still queued): read-your-writes.
    hits = agent.search(PROJECT, "submission deadline task-proposal-017", k=5)["results"]
    assert [h["memory_id"] for h in hits] == [second["memory_id"]]  # only the usable one

    attempt = agent.report_recheck(second["memory_id"], "source_unavailable", error="timeout")
    assert attempt["outcome"] == "source_unavailable" and attempt["memory_id"] == second["memory_id"]

    room: dict[str, Any] = {"project_id": PROJECT, "subject_id": "sato", "predicate": "meeting_room"}
    said = now() - timedelta(hours=1)  # two equal-rank sources, the same instant: nothing orders them
    other = agent.assert_fact(**room, value="Room 3", valid_from=said, source_ref="chat:1", source_revision="1")
    rival = personas.client("agent-9").assert_fact(
        **room, value="Room 5", valid_from=said, source_ref="chat:2", source_revision="1"
    )
    assert rival["outcome"] == "disputed" and rival["dispute_id"]
    open_disputes = list(owner.disputes())
    assert [d["id"] for d in open_disputes] == [rival["dispute_id"]]
    resolved = owner.resolve_dispute(rival["dispute_id"], winner=other["memory_id"], reason="The booking says 3.")
    assert resolved["status"] == "resolved" and resolved["winner"] == other["memory_id"]

    assert owner.exclude(other["memory_id"], "Not for agents.")["status"] == "excluded"
    assert owner.expire(second["memory_id"], "The task was cancelled.")["status"] == "expired"

    preview = compliance.request_deletion(PROJECT, {"subject_id": "sato"}, "Subject asked.", dry_run=True)
    assert preview["dry_run"] is True  # type: ignore[typeddict-item]
    filed = compliance.request_deletion(
        PROJECT,
        {"subject_id": "sato"},
        "Subject asked.",
        preview_id=preview["preview_id"],  # type: ignore[typeddict-item]
    )
    report = compliance.deletion(filed["id"])  # type: ignore[typeddict-item]
    assert report["stages"]["accepted_at"] and report["stages"]["removed_from_reads_at"]


def test_search_finds_a_write_at_once_and_takes_subject_and_predicate_filters(personas: Personas) -> None:
    agent = personas.client("agent-7")
    mine = agent.assert_fact(
        PROJECT, "sato", "meeting_room", "Room 3 weekly", valid_from=now(), source_ref="chat:1", source_revision="1"
    )
    for i in range(3):  # newer facts of other subjects and fields, with the same words
        agent.assert_fact(
            PROJECT,
            f"other-{i}",
            "meeting_room",
            f"Room {i} weekly",
            valid_from=now(),
            source_ref=f"chat:o{i}",
            source_revision="1",
        )
        agent.assert_fact(
            PROJECT,
            "sato",
            f"note_{i}",
            f"Room {i} weekly",
            valid_from=now(),
            source_ref=f"chat:n{i}",
            source_revision="1",
        )
    found = agent.search(PROJECT, "room weekly", k=1, subject_id="sato", predicate="meeting_room")["results"]
    assert [(h["memory_id"], h["match"], h["score"], h["rank"]) for h in found] == [
        (mine["memory_id"], "keyword", None, 1)
    ]
    assert {h["subject_id"] for h in agent.search(PROJECT, "room weekly", k=10, subject_id="sato")["results"]} == {
        "sato"
    }
    assert {h["predicate"] for h in agent.search(None, "room weekly", k=10, predicate="meeting_room")["results"]} == {
        "meeting_room"
    }
    with pytest.raises(InvalidInput):
        agent.search(PROJECT, "room", subject_id="../etc")


def test_a_read_with_session_id_registers_the_context_load_in_the_same_call(personas: Personas) -> None:
    agent = personas.client("agent-7")
    first = first_deadline(agent)
    fact = agent.current(**DEADLINE, session_id="s-read", context_expires_at=now() + timedelta(hours=1))
    assert fact["context_load"] is not None
    assert (fact["context_load"]["agent_id"], fact["context_load"]["session_id"]) == ("agent-7", "s-read")
    found = agent.search(PROJECT, "submission deadline task-proposal-017", k=5, session_id="s-read")
    assert [h["memory_id"] for h in found["results"]] == [first["memory_id"]]
    assert found["context_load"] is not None and found["context_load"]["id"] != fact["context_load"]["id"]
    assert "context_load" not in agent.current(**DEADLINE)  # no session_id: nothing registered

    move_deadline(agent, expected=1)
    notices = agent.notices("agent-7")
    assert sorted(n["context_load_id"] for n in notices) == sorted(
        [fact["context_load"]["id"], found["context_load"]["id"]]
    )

    token = personas.token("agent-9", "agent")

    async def read_async() -> t.Fact:
        async with AsyncClient(personas.base_url, token) as other:
            return await other.current(**DEADLINE, session_id="s-async")

    assert asyncio.run(read_async())["context_load"]["agent_id"] == "agent-9"  # type: ignore[index]
    with pytest.raises(InvalidInput):
        agent.current(**DEADLINE, session_id="s" * 201)


def test_every_method_of_the_async_client_over_http(personas: Personas) -> None:
    tokens = [
        personas.token("agent-7", "agent"),
        personas.token("olivia", "owner"),
        personas.token("carl", "compliance"),
    ]

    async def scenario() -> None:
        async with (
            AsyncClient(personas.base_url, tokens[0]) as agent,
            AsyncClient(personas.base_url, tokens[1]) as owner,
            AsyncClient(personas.base_url, tokens[2]) as compliance,
        ):
            first = await agent.assert_fact(
                **DEADLINE,
                value="Oct 30",
                valid_from="2026-10-20T09:00:00+09:00",
                source_ref=REF,
                source_revision="r17",
            )
            base = [{"memory_id": first["memory_id"], "revision": 1}]
            assert (await agent.current(**DEADLINE))["value"] == "Oct 30"
            await agent.load_context("s-async", base, now() + timedelta(hours=1))
            summary = await agent.create_summary(PROJECT, "Due Oct 30.", base)
            planned = await agent.create_scheduled_action(PROJECT, "reminder", {}, now() + timedelta(days=1), base)
            with pytest.raises(ExpectedRevisionRequired):
                await agent.assert_fact(
                    **DEADLINE,
                    value="Nov 2",
                    valid_from="2026-10-22T09:00:00+09:00",
                    source_ref=REF,
                    source_revision="r18",
                )
            second = await agent.assert_fact(
                **DEADLINE,
                value="Nov 2",
                valid_from="2026-10-22T09:00:00+09:00",
                source_ref=REF,
                source_revision="r18",
                expected_revision=1,
            )
            assert (await agent.record(first["memory_id"]))["superseded_by"] == second["memory_id"]
            assert len((await agent.history(first["memory_id"]))["results"]) == 2
            assert len([r async for r in agent.records(project_id=PROJECT, page_size=1)]) == 2
            notices = await agent.notices("agent-7")
            assert len(notices) == 1
            await agent.ack("agent-7", notices[0]["id"])
            assert (await agent.summary(summary["id"]))["id"] == summary["id"]
            assert (await agent.scheduled_action(planned["id"]))["status"] == "suspended"
            assert (await agent.search(PROJECT, "deadline", k=3))["results"][0]["memory_id"] == second["memory_id"]
            attempt = await agent.report_recheck(second["memory_id"], "not_checked")
            assert attempt["outcome"] == "not_checked"
            assert [d async for d in owner.disputes()] == []
            with pytest.raises(NotFound):
                await owner.resolve_dispute("dsp-missing", exclude_all=True, reason="none")
            assert (await owner.exclude(second["memory_id"], "Hold."))["status"] == "excluded"
            with pytest.raises(InvalidState):  # a 409: an excluded record cannot expire
                await owner.expire(second["memory_id"], "End.")
            filed = await compliance.request_deletion(PROJECT, {"subject_id": DEADLINE["subject_id"]}, "Asked.")
            report = await compliance.deletion(filed["id"])  # type: ignore[typeddict-item]
            assert report["stages"]["removed_from_reads_at"] is not None

    asyncio.run(scenario())


# --- Errors, mapped from real answers -------------------------------------------------------------------


def test_a_stale_expected_revision_raises_revision_conflict_with_the_current_record(agent_client: Client) -> None:
    first = first_deadline(agent_client)
    second = move_deadline(agent_client, expected=1)
    with pytest.raises(RevisionConflict) as caught:
        move_deadline(agent_client, expected=1, value="2026-11-09T17:00+09:00", revision=19)
    error = caught.value
    assert (error.status, error.code) == (409, "revision_conflict")
    assert error.current is not None and error.current["memory_id"] == second["memory_id"]
    assert error.current["revision"] == 2 and first["memory_id"] != second["memory_id"]


def test_a_missing_expected_revision_raises_expected_revision_required(agent_client: Client) -> None:
    first_deadline(agent_client)
    with pytest.raises(ExpectedRevisionRequired) as caught:
        agent_client.assert_fact(
            **DEADLINE,
            value="Nov 2",
            valid_from=datetime(2026, 10, 22, tzinfo=UTC),
            source_ref=REF,
            source_revision="r18",
        )
    assert caught.value.status == 428 and caught.value.current is not None and caught.value.current["revision"] == 1


def test_acting_on_an_unverified_value_raises_recheck_required_with_the_last_verified_value(
    personas: Personas, agent_client: Client
) -> None:
    personas.token("ada", "admin")
    policies.save_field_policy(
        personas.principals["ada"],
        {
            "project_id": PROJECT,
            "predicate": "send_permission",
            "on_failure": "block_action",
            "recheck_interval": timedelta(days=1),
            "authorized_issuers": [],
        },
    )
    personas.token("agent-7", "agent")
    verified = now() - timedelta(days=3)
    record = assert_fact(
        personas.principals["agent-7"],
        Assertion(
            project_id=PROJECT,
            subject_id="agent-mailer",
            predicate="send_permission",
            value="allowed",
            valid_from=verified,
            source_canonical_ref="acl:mailer",
            source_revision="1",
        ),
        now=verified,
        verified_at=verified,
    ).record
    with pytest.raises(RecheckRequired) as caught:
        agent_client.current(PROJECT, "agent-mailer", "send_permission", purpose="action")
    error = caught.value
    assert (error.status, error.code, error.memory_id) == (409, "recheck_required", record.memory_id)
    assert error.last_verified_value == "allowed"
    assert error.last_verified_at is not None and datetime.fromisoformat(error.last_verified_at) == verified
    assert agent_client.current(PROJECT, "agent-mailer", "send_permission")["caveat"]  # answering still works


def test_an_unauthorized_issuer_raises_issuer_not_authorized(personas: Personas, agent_client: Client) -> None:
    personas.token("ada", "admin")
    policies.save_field_policy(
        personas.principals["ada"],
        {"project_id": PROJECT, "predicate": "approval_limit", "authorized_issuers": ["olivia"]},
    )
    with pytest.raises(IssuerNotAuthorized) as caught:
        agent_client.assert_fact(
            PROJECT, "expense-policy", "approval_limit", 100, valid_from=now(), source_ref="chat", source_revision="1"
        )
    assert (caught.value.status, caught.value.code) == (403, "issuer_not_authorized")
    assert isinstance(caught.value, Forbidden)


def test_a_base_no_longer_current_raises_base_not_current(agent_client: Client) -> None:
    first = first_deadline(agent_client)
    move_deadline(agent_client, expected=1)
    with pytest.raises(BaseNotCurrent) as caught:
        agent_client.create_summary(PROJECT, "Due Oct 30.", [{"memory_id": first["memory_id"], "revision": 1}])
    assert (caught.value.status, caught.value.code) == (409, "base_not_current")


def test_reading_what_a_deletion_removed_raises_tombstoned(personas: Personas, agent_client: Client) -> None:
    first = first_deadline(agent_client)
    summary = agent_client.create_summary(PROJECT, "Due Oct 30.", [{"memory_id": first["memory_id"], "revision": 1}])
    personas.client("carl", "compliance").request_deletion(PROJECT, {"subject_id": DEADLINE["subject_id"]}, "Asked.")
    with pytest.raises(Tombstoned) as caught:
        agent_client.summary(summary["id"])
    assert (caught.value.status, caught.value.code) == (410, "tombstoned")


def test_not_found_invalid_input_and_a_bad_token_are_their_own_errors(personas: Personas, agent_client: Client) -> None:
    with pytest.raises(NotFound) as missing:
        agent_client.record("mem-does-not-exist")
    assert missing.value.status == 404
    with pytest.raises(InvalidInput) as invalid:
        agent_client.current(PROJECT, "has/slash", "x")
    assert invalid.value.status == 400 and "subject_id" in invalid.value.errors
    with pytest.raises(AuthenticationFailed) as refused, Client(personas.base_url, "mga_not-a-token") as stranger:
        stranger.current(**DEADLINE)
    assert refused.value.status == 401


def test_another_tenants_token_sees_nothing(personas: Personas, agent_client: Client) -> None:
    first = first_deadline(agent_client)
    outsider = Client(personas.base_url, personas.token("oscar", "agent", tenant="globex"))
    with pytest.raises(NotFound):
        outsider.record(first["memory_id"])
    assert list(outsider.records(project_id=PROJECT)) == []


# --- Retries: never on 409/428, on 503 and connection errors --------------------------------------------


def test_a_409_or_428_is_sent_once_never_retried(agent_client: Client, server_requests: list[str]) -> None:
    first_deadline(agent_client)
    move_deadline(agent_client, expected=1)
    server_requests.clear()
    with pytest.raises(RevisionConflict):
        move_deadline(agent_client, expected=1, value="later", revision=19)
    assert server_requests == ["POST /api/v1/records/"]
    server_requests.clear()
    with pytest.raises(ExpectedRevisionRequired):
        agent_client.assert_fact(
            **DEADLINE,
            value="later",
            valid_from=datetime(2026, 10, 25, tzinfo=UTC),
            source_ref=REF,
            source_revision="r19",
        )
    assert server_requests == ["POST /api/v1/records/"]


class _Stub(BaseHTTPRequestHandler):
    """Answers the scripted statuses in turn (503 first, say), then 200 with a JSON body; counts requests."""

    script: list[int]
    seen: list[str]

    def _answer(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        status = self.script.pop(0) if self.script else 200
        body = json.dumps({"code": "unavailable", "detail": "busy"} if status >= 400 else {"results": []}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[tuple[str, list[int], list[str]]]:
    script: list[int] = []
    seen: list[str] = []
    handler = type("Handler", (_Stub,), {"script": script, "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script, seen
    finally:
        server.shutdown()
        server.server_close()


NO_WAIT = RetryPolicy(attempts=3, backoff=0.0)


@pytest.mark.django_db(transaction=False)
def test_a_503_is_retried_until_the_server_answers(stub: tuple[str, list[int], list[str]]) -> None:
    url, script, seen = stub
    script.extend([503, 503])
    with Client(url, "token", retry=NO_WAIT) as client:
        assert client.search(PROJECT, "deadline") == {"results": []}
    assert len(seen) == 3
    seen.clear()
    script.extend([503, 503, 503, 503])
    with Client(url, "token", retry=NO_WAIT) as client, pytest.raises(ServiceUnavailable) as caught:
        client.assert_fact(**DEADLINE, value=1, valid_from=now(), source_ref="x", source_revision="1")
    assert len(seen) == 3 and caught.value.status == 503  # three tries in all, then the error


@pytest.mark.django_db(transaction=False)
def test_the_async_client_retries_a_503_too(stub: tuple[str, list[int], list[str]]) -> None:
    url, script, seen = stub
    script.append(503)

    async def search() -> t.SearchResult:
        async with AsyncClient(url, "token", retry=NO_WAIT) as client:
            return await client.search(PROJECT, "deadline")

    assert asyncio.run(search()) == {"results": []} and len(seen) == 2


@pytest.mark.django_db(transaction=False)
def test_a_409_from_any_server_is_not_retried(stub: tuple[str, list[int], list[str]]) -> None:
    url, script, seen = stub
    script.extend([409, 428])
    with Client(url, "token", retry=NO_WAIT) as client:
        with pytest.raises(Exception) as first:
            client.search(PROJECT, "x")
        with pytest.raises(Exception) as second:
            client.search(PROJECT, "x")
    assert (first.value.status, second.value.status) == (409, 428)  # type: ignore[attr-defined]
    assert len(seen) == 2


@pytest.mark.django_db(transaction=False)
def test_a_refused_connection_is_retried_then_raised() -> None:
    import socket

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    attempts: list[int] = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            attempts.append(1)
            return super().handle_request(request)

    with Client(f"http://127.0.0.1:{port}", "token", retry=NO_WAIT, transport=Counting()) as client:
        with pytest.raises(httpx.ConnectError):
            client.assert_fact(**DEADLINE, value=1, valid_from=now(), source_ref="x", source_revision="1")
    assert len(attempts) == 3  # a connect error: the request never reached a server, so a write is retried too


# --- Typed results match the live schema ---------------------------------------------------------------

SCHEMA_NAMES: dict[str, type] = {
    "Record": t.Record,
    "AssertResult": t.AssertResult,
    "RecordHistory": t.RecordHistory,
    "SourceOut": t.SourceOut,
    "Candidate": t.Candidate,
    "Fact": t.Fact,
    "ContextLoadRef": t.ContextLoadRef,
    "Dispute": t.Dispute,
    "RecheckAttempt": t.RecheckAttempt,
    "SearchHit": t.SearchHit,
    "SearchResult": t.SearchResult,
    "ContextLoadOut": t.ContextLoad,
    "InvalidationOut": t.Invalidation,
    "InvalidationList": t.InvalidationList,
    "SummaryOut": t.Summary,
    "ActionOut": t.ScheduledAction,
    "DeletionReport": t.DeletionReport,
    "Stages": t.DeletionStages,
    "StoreProgress": t.StoreProgress,
    "DeletionPreview": t.DeletionPreview,
}


def test_the_typed_results_name_the_fields_of_the_live_schema(personas: Personas, agent_client: Client) -> None:
    schema: dict[str, Any] = agent_client.send(Call("GET", "schema/", {"format": "json"}))
    components = schema["components"]["schemas"]
    for name, typed in SCHEMA_NAMES.items():
        hints = typing.get_type_hints(typed)
        assert set(hints) == set(components[name]["properties"]), name


def test_datetimes_without_an_offset_are_refused_before_sending(agent_client: Client) -> None:
    with pytest.raises(ValueError, match="offset"):
        agent_client.current(**DEADLINE, valid_at=datetime(2026, 10, 21))
