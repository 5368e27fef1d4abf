"""The MCP server: the official SDK's `MCPServer` (mcp 2.x; v1's FastMCP was renamed to it), with the nine
tools of issue 13. Both transports serve this one server object:

- stdio: `python manage.py mcp --token …` (memory_admin/ops/management/commands/mcp.py);
- Streamable HTTP at `/mcp/` in the web app (memory_admin/mcp/http.py), stateless with JSON answers, so it
  runs under runserver and gunicorn (WSGI) alike.

Who calls is decided once, by the transport, before any tool runs (`acting_as(caller)`): the HTTP view
authenticates the bearer token (401 otherwise); the stdio command checks its token at start and again on
every call (a revoked token stops working at its next call, as on the API). Every call then goes through
`_run`, the one place that sets the tenant (`tenant_context`), applies the API's throttles (HTTP), calls the
tool body (memory_admin/mcp/tools.py, which calls the domain functions) and writes the audit event with the
agent as actor.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from django.http import HttpRequest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from rest_framework import exceptions

from memory_admin.accounts.models import ApiToken, Principal
from memory_admin.accounts.tenancy import current_tenant_id, tenant_context
from memory_admin.lib.errors import DomainError
from memory_admin.lib.throttling import throttle_wait
from memory_admin.mcp import tools
from memory_admin.memory import audit

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
The governed memory of this organisation. Facts are keyed by project_id, subject_id and predicate.
- recall gives the current value with its freshness and a caveat; use purpose="action" before acting on a
  value (sending, granting, buying): it refuses when the value cannot be verified now, and then you must not act.
- remember asserts a fact from a named source. Changing a fact needs expected_revision (the revision you read):
  on a conflict, read again and decide; never overwrite blindly. A "disputed" outcome means no value is current.
- Pass session_id to recall to be told (pending_notices) when a value you loaded is superseded;
  re-read it, then acknowledge_notice.
- request_forget only files a request: compliance staff decide, an agent never deletes. Its reason says why,
  never what: do not quote the values being forgotten.
"""


@dataclass
class Caller:
    """Who calls, as the transport established it. `authenticate` runs before every call, on the thread that
    runs the tool (HTTP: returns the principal the view authenticated; stdio: looks the token up again)."""

    authenticate: Callable[[], tuple[Principal, ApiToken | None]]
    transport: str
    request: HttpRequest | None = None  # HTTP: the API throttles count this request's principal and address


_caller: ContextVar[Caller | None] = ContextVar("mcp_caller", default=None)


@contextmanager
def acting_as(caller: Caller) -> Iterator[None]:
    token = _caller.set(caller)
    try:
        yield
    finally:
        _caller.reset(token)


def _audit(principal: Principal, name: str, caller: Caller, answer: tools.Answer) -> None:
    # The tool and its outcome only: arguments and values are memory content, which a deletion must reach.
    after: dict[str, Any] = {
        "transport": caller.transport,
        "outcome": str(answer.payload.get("code", "error")) if answer.error else "ok",
    }
    if answer.memory_id:
        after["memory_id"] = answer.memory_id
    audit.record_event(
        tenant=principal.tenant_pk,
        actor=principal,
        action=audit.Action.MCP_TOOL_CALLED,
        object_type="mcp_tool",
        object_id=name,
        after=after,
    )


def _run(caller: Caller, name: str, arguments: dict[str, Any]) -> tools.Answer:
    """One tool call, synchronously, for the caller: tenant, throttle, body, audit."""
    if caller.transport == "stdio":
        close_old_connections()  # a long-lived process: drop a connection that died or outlived its age
    try:
        principal, _ = caller.authenticate()
    except exceptions.AuthenticationFailed as exc:
        return tools.refusal(exc, tool=name)
    body = tools.BODIES[name]
    # The HTTP door's token authentication has set the tenant for the request already (accounts/auth.py, restored
    # by the request's scope); set it here otherwise (stdio), or if it differs, and restore it after the call.
    tenant: AbstractContextManager[Any] = (
        nullcontext() if current_tenant_id() == principal.tenant_pk else tenant_context(principal.tenant_pk)
    )
    with tenant:
        wait = throttle_wait(caller.request, body.scope) if caller.request is not None else None
        if wait is not None:
            answer = tools.refusal(exceptions.Throttled(wait), tool=name)
            answer.payload["retry_after"] = math.ceil(wait)
            # Over HTTP the answer is a JSON-RPC result in a 200 (a 429 would reach the SDK's caller as a bare
            # "Server returned an error response", without retry_after); its Retry-After header says the same.
            if caller.request is not None:
                caller.request.mcp_retry_after = math.ceil(wait)  # type: ignore[attr-defined]
        else:
            try:
                answer = body.fn(principal, **arguments)
            except (DomainError, exceptions.APIException) as exc:
                answer = tools.refusal(exc, tool=name)
            except Exception as exc:
                # The type only: a database error's message quotes the row it refused
                # (docs/operations.md "What is logged").
                log.error("MCP tool %s failed: %s", name, type(exc).__name__)
                answer = tools.failure(tool=name)
        try:
            _audit(principal, name, caller, answer)
        except Exception as exc:  # the answer stands; the failure is logged like any other (type only)
            log.error("MCP tool %s: the audit event could not be written: %s", name, type(exc).__name__)
    return answer


def _result(answer: tools.Answer) -> CallToolResult:
    payload = json.loads(json.dumps(answer.payload, cls=DjangoJSONEncoder))
    return CallToolResult(
        content=[
            TextContent(type="text", text=answer.summary),
            TextContent(type="text", text=json.dumps(payload, ensure_ascii=False)),
        ],
        structured_content=payload,
        is_error=answer.error,
    )


async def _call(name: str, **arguments: Any) -> CallToolResult:
    caller = _caller.get()
    if caller is None:  # a transport that did not say who calls: refuse, never act as nobody
        return _result(tools.refusal(exceptions.NotAuthenticated("No caller."), tool=name))
    # thread_sensitive: under the WSGI bridge this is the request's own thread (its connection and tenant).
    answer = await sync_to_async(_run, thread_sensitive=True)(caller, name, arguments)
    return _result(answer)


ProjectId = Annotated[str, Field(description="Project id, e.g. project-a")]
SubjectId = Annotated[str, Field(description="What the fact is about, e.g. task-proposal-017")]
Predicate = Annotated[str, Field(description="The field, e.g. submission_deadline")]
Instant = Annotated[str | None, Field(description="ISO 8601 with an offset, e.g. 2026-10-21T12:00:00+09:00")]
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


class _Server(MCPServer):
    """The SDK's server, with arguments its input schema refuses answered in the product's shape ({code: invalid,
    detail, errors, next_step}) instead of the SDK's text dump of the validation error."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return _result(tools.invalid_arguments(exc.__cause__, name))
            raise


class SourceIn(BaseModel):
    """Where a value comes from, as `POST /records/` nests it."""

    canonical_ref: Annotated[str, Field(description="e.g. task-system:project-a/task-17")]
    revision: Annotated[str, Field(description="The source's revision or version, e.g. r18")]
    event_ids: Annotated[list[str] | None, Field(description="Ids of the events it was taken from")] = None


class DerivedFrom(BaseModel):
    """One fact another was worked out from, as `POST /records/`'s `derived_from` names it."""

    memory_id: Annotated[str, Field(description="The memory_id you read")]
    revision: Annotated[int, Field(description="The revision you read")]


# A value as JSON gives it (declared, so strict function-calling clients know what to send): null is refused.
JsonValue = str | int | float | bool | list[Any] | dict[str, Any]


def build_server() -> MCPServer:
    server: MCPServer = _Server("memory-governance", instructions=INSTRUCTIONS, version="1")

    @server.tool(annotations=WRITE)
    async def remember(
        project_id: ProjectId,
        subject_id: SubjectId,
        predicate: Predicate,
        value: Annotated[JsonValue, Field(description="The value: a string, number, boolean, array or object")],
        source_ref: Annotated[
            str | None, Field(description="Where it comes from, e.g. task-system:project-a/task-17")
        ] = None,
        source_revision: Annotated[str | None, Field(description="The source's revision or version, e.g. r18")] = None,
        source: Annotated[
            SourceIn | None,
            Field(
                description="The same source as POST /records/ nests it (give this or source_ref and source_revision)"
            ),
        ] = None,
        valid_from: Instant = None,
        valid_to: Instant = None,
        expected_revision: Annotated[
            int | None, Field(description="The revision you read; required to change an existing fact")
        ] = None,
        derived_from: Annotated[
            list[DerivedFrom] | None, Field(description="The facts this one was worked out from, each as read")
        ] = None,
        event_ids: Annotated[
            list[str] | None, Field(description="Ids of the events (POST /events/) the value was taken from")
        ] = None,
    ) -> CallToolResult:
        """Assert a fact. Answers the outcome (created, history, unchanged, disputed) and the revision. A fact
        that already has a value changes only with expected_revision = the revision you read: a mismatch is
        refused (revision_conflict: read again, decide, retry), never silently overwritten. The source is
        source_ref + source_revision, or source {canonical_ref, revision}. valid_from defaults to now."""
        return await _call(
            "remember",
            project_id=project_id,
            subject_id=subject_id,
            predicate=predicate,
            value=value,
            source_ref=source_ref,
            source_revision=source_revision,
            source=source.model_dump(exclude_none=True) if source is not None else None,
            valid_from=valid_from,
            valid_to=valid_to,
            expected_revision=expected_revision,
            derived_from=[base.model_dump() for base in derived_from] if derived_from is not None else None,
            event_ids=event_ids,
        )

    @server.tool(annotations=READ)
    async def recall(
        project_id: ProjectId,
        subject_id: SubjectId,
        predicate: Predicate,
        purpose: Annotated[
            Literal["answer", "action"],
            Field(description='"action" before acting on the value: refused when it cannot be verified now'),
        ] = "answer",
        session_id: Annotated[
            str | None, Field(description="Your session: registers the value as loaded, to get notices later")
        ] = None,
    ) -> CallToolResult:
        """The current value with its freshness, last verification and caveat. With purpose="action" the value
        is rechecked against its canonical source first when its policy asks, and the call is refused when it
        cannot be verified: then do not act, and report the last verified value and time. Either way a read for
        acting answers receipt_id, the signed record of what you were told (keep it with what you do)."""
        return await _call(
            "recall",
            project_id=project_id,
            subject_id=subject_id,
            predicate=predicate,
            purpose=purpose,
            session_id=session_id,
        )

    @server.tool(annotations=READ)
    async def recall_as_of(
        project_id: ProjectId,
        subject_id: SubjectId,
        predicate: Predicate,
        valid_at: Instant = None,
        known_at: Instant = None,
    ) -> CallToolResult:
        """The value as of a past or future instant: valid_at asks what held in the world then ("what was the
        deadline on Oct 21"), known_at what this system believed then. Give one or both."""
        return await _call(
            "recall_as_of",
            project_id=project_id,
            subject_id=subject_id,
            predicate=predicate,
            valid_at=valid_at,
            known_at=known_at,
        )

    @server.tool(annotations=READ)
    async def history(
        memory_id: Annotated[str | None, Field(description="Any record of the fact")] = None,
        project_id: str | None = None,
        subject_id: str | None = None,
        predicate: str | None = None,
    ) -> CallToolResult:
        """Every version of a fact, oldest first: values, statuses, validity, sources, who superseded what.
        Name the fact by memory_id, or by project_id, subject_id and predicate."""
        return await _call(
            "history", memory_id=memory_id, project_id=project_id, subject_id=subject_id, predicate=predicate
        )

    @server.tool(annotations=READ)
    async def search_memory(
        q: Annotated[str, Field(description="What to look for, in words")],
        project_id: str | None = None,
        k: Annotated[int, Field(ge=1, le=100, description="How many results")] = 10,
        subject_id: Annotated[str | None, Field(description="Only this subject's memories")] = None,
        predicate: Annotated[str | None, Field(description="Only memories of this field")] = None,
    ) -> CallToolResult:
        """Search memory by meaning. Only usable records (current beliefs) come back, best first, each with its
        status, rank and score (cosine similarity in [-1, 1]; null for a keyword match of a memory written a
        moment ago, not embedded yet); stale copies the index still holds are left out."""
        return await _call("search_memory", q=q, project_id=project_id, k=k, subject_id=subject_id, predicate=predicate)

    @server.tool(annotations=READ)
    async def list_conflicts(project_id: str | None = None) -> CallToolResult:
        """Open disputes: facts where sources of equal rank disagree, with both candidates. No value is current
        for them until an owner resolves them."""
        return await _call("list_conflicts", project_id=project_id)

    @server.tool(annotations=READ)
    async def pending_notices() -> CallToolResult:
        """Notices for values you loaded (recall with session_id) that changed since: re-read each, replace what
        you hold, then acknowledge_notice."""
        return await _call("pending_notices")

    @server.tool(annotations=WRITE)
    async def acknowledge_notice(
        notice_id: Annotated[str, Field(description="The id from pending_notices")],
    ) -> CallToolResult:
        """Say you applied a notice (replaced the stale value you held)."""
        return await _call("acknowledge_notice", notice_id=notice_id)

    @server.tool(annotations=WRITE)
    async def request_forget(
        project_id: ProjectId,
        reason: Annotated[
            str,
            Field(
                description="Why it must be forgotten (kept for the regulator). Say why, never what: do not quote "
                "the values, e-mail addresses or other personal data being forgotten (any found are replaced by "
                "[redacted] before the reason is kept)"
            ),
        ],
        subject_id: Annotated[str | None, Field(description="Forget everything about this subject")] = None,
        memory_ids: Annotated[list[str] | None, Field(description="Or these records")] = None,
    ) -> CallToolResult:
        """File a deletion request for a subject or some records, with the reason (required: it is kept with the
        request for the regulator). Give subject_id or memory_ids. Compliance staff must approve it; nothing is
        deleted until they do (an agent never deletes on its own). The reason says why, not what: never quote the
        values being forgotten (an e-mail address, a name, a number); the server cuts any it finds out of the
        reason and says so (reason_redacted)."""
        return await _call(
            "request_forget", project_id=project_id, reason=reason, subject_id=subject_id, memory_ids=memory_ids
        )

    return server


_server: MCPServer | None = None


def get_server() -> MCPServer:
    """The process's one server object (tools are registered once)."""
    global _server
    if _server is None:
        _server = build_server()
    return _server
