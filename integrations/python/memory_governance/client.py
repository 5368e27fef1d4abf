"""`Client` (sync) and `AsyncClient` (async): the same methods, each one line sending the call that
`_calls` builds; requests, answers, errors, retries and pagination are `_core`'s, shared by both."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import date, datetime
from typing import Any, Literal, TypeVar

import httpx

from memory_governance import _calls, _core
from memory_governance._calls import Include, Purpose
from memory_governance._core import Call, RetryPolicy
from memory_governance.types import (
    AssertResult,
    BaseRef,
    BatchResult,
    ContextLoad,
    DeletionPreview,
    DeletionReport,
    Dispute,
    ExpiryRequest,
    Fact,
    Invalidation,
    RecheckAttempt,
    Record,
    RecordHistory,
    ScheduledAction,
    SearchResult,
    Summary,
)

T = TypeVar("T")
USER_AGENT = "memory-governance-client/0.1"
DisputeStatus = Literal["open", "resolved", "all"]


def _http_options(base_url: str, token: str, timeout: float) -> dict[str, Any]:
    return {
        "base_url": base_url.rstrip("/"),
        "headers": _core.headers(token, USER_AGENT),
        "timeout": timeout,
        "trust_env": False,  # no proxy from the environment: the server is named explicitly
    }


class Client:
    """Sync client. `Client(base_url, token)`; pass `transport=` (an httpx transport) to route requests
    elsewhere (tests), `retry=RetryPolicy(attempts=1)` to turn retries off."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(transport=transport, **_http_options(base_url, token, timeout))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one call, retrying on connection errors and 503 only (see RetryPolicy)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(call.method, _core.url_of(call), **_core.request_kwargs(call))
            except httpx.TransportError as exc:
                if not self.retry.retry_error(call, exc, attempt):
                    raise
                time.sleep(self.retry.delay(attempt))
                continue
            if self.retry.retry_response(response, attempt):
                time.sleep(self.retry.delay(attempt, response))
                continue
            return _core.result(call, response)

    def _pages(self, call: Call[Any] | None) -> Iterator[Any]:
        while call is not None:
            page = self.send(call)
            yield from page["results"]
            call = _core.next_page(call, page)

    # --- Facts ---------------------------------------------------------------------------------

    def assert_fact(
        self,
        project_id: str,
        subject_id: str,
        predicate: str,
        value: Any,
        *,
        source_ref: str | None = None,
        source_revision: str | None = None,
        source: Mapping[str, Any] | None = None,
        valid_from: datetime | str | None = None,
        valid_to: datetime | str | None = None,
        expected_revision: int | None = None,
        derived_from: Iterable[BaseRef] | None = None,
        event_ids: Iterable[str] | None = None,
    ) -> AssertResult:
        """Assert a fact (`POST /records/`). `result["outcome"]` says what it did: created (201), history
        or unchanged (200), disputed (202). Without `valid_from` it holds from the time of the request (the
        answer's `valid_from` says when). The source is flat (`source_ref`, `source_revision`) or nested as in the
        record shape (`source={"canonical_ref": ..., "revision": ...}`): a line of an import file can be passed as
        `assert_fact(**line)`. Refusals raise IssuerNotAuthorized, RevisionConflict, ExpectedRevisionRequired,
        DisputeOpen, Tombstoned."""
        return self.send(
            _calls.assert_fact(
                project_id,
                subject_id,
                predicate,
                value,
                valid_from=valid_from,
                source_ref=source_ref,
                source_revision=source_revision,
                source=source,
                valid_to=valid_to,
                expected_revision=expected_revision,
                derived_from=derived_from,
                event_ids=event_ids,
            )
        )

    def assert_facts(self, items: Iterable[Mapping[str, Any]], *, atomic: bool = False) -> BatchResult:
        """Assert up to 1,000 facts in one request (`POST /records/batch/`). Each item is a `POST /records/` body
        (`memory_governance.fact_body(...)` builds one with `assert_fact`'s arguments); the answer has a result per
        item in order (`results[i]["outcome"]`, and `record` or `error`), so one refused item raises nothing.
        With `atomic=True` it is all or nothing: if any item fails, nothing is written and BatchNotApplied is
        raised (its `failed` and `results` say which and why)."""
        return self.send(_calls.assert_facts(items, atomic=atomic))

    def current(
        self,
        project_id: str,
        subject_id: str,
        predicate: str,
        purpose: Purpose = "answer",
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        session_id: str | None = None,
        context_expires_at: datetime | str | None = None,
    ) -> Fact:
        """The usable value now (or as of `valid_at`/`known_at`) with its freshness and caveat. For
        `purpose="action"` a value that must be verified first raises RecheckRequired. With `session_id`
        the answer is also registered as a context load (its id in `context_load`)."""
        return self.send(
            _calls.current(
                project_id, subject_id, predicate, purpose, valid_at, known_at, session_id, context_expires_at
            )
        )

    def record(self, memory_id: str) -> Record:
        return self.send(_calls.record(memory_id))

    def history(self, memory_id: str) -> RecordHistory:
        return self.send(_calls.history(memory_id))

    def records(self, **filters: Any) -> Iterator[Record]:
        """Every record matching the filters, following the cursor pages lazily."""
        return self._pages(_calls.records(**filters))

    def search(
        self,
        project_id: str | None,
        q: str,
        k: int = 10,
        include: Include = "usable",
        session_id: str | None = None,
        context_expires_at: datetime | str | None = None,
        *,
        subject_id: str | None = None,
        predicate: str | None = None,
    ) -> SearchResult:
        """Top-k hits, best first (`rank`; `score` is cosine similarity, null for a keyword match of a record not
        embedded yet); with `session_id` the usable ones are registered as a context load (`context_load`).
        `subject_id` and `predicate` narrow the search on the server."""
        return self.send(
            _calls.search(
                project_id,
                q,
                k,
                include,
                session_id,
                context_expires_at,
                subject_id=subject_id,
                predicate=predicate,
            )
        )

    def disputes(self, status: DisputeStatus = "open") -> Iterator[Dispute]:
        return self._pages(_calls.disputes(status))

    def resolve_dispute(
        self, dispute_id: str, *, winner: str | None = None, exclude_all: bool = False, reason: str = ""
    ) -> Dispute:
        return self.send(_calls.resolve_dispute(dispute_id, winner=winner, exclude_all=exclude_all, reason=reason))

    def exclude(self, memory_id: str, reason: str) -> Record:
        return self.send(_calls.exclude(memory_id, reason))

    def expire(self, memory_id: str, reason: str, valid_to: datetime | str | None = None) -> Record:
        """Expire the record (kept as history): owners and admins, or an agent that asserted it where the field's
        policy lets agents expire their own facts; otherwise Forbidden (then `request_expiry`)."""
        return self.send(_calls.expire(memory_id, reason, valid_to))

    def request_expiry(self, memory_id: str, reason: str) -> ExpiryRequest:
        """Ask an owner to expire the record (an agent's governed delete). Nothing changes until an owner or admin
        approves; `result["created"]` is False when a request for it was already pending."""
        return self.send(_calls.request_expiry(memory_id, reason))

    def expiry_requests(self, status: str = "pending") -> list[ExpiryRequest]:
        """The tenant's expiry requests in `status` (pending, approved, declined), for owners and admins."""
        return self.send(_calls.expiry_requests(status))["results"]

    def approve_expiry(self, request_id: str, reason: str = "") -> ExpiryRequest:
        """Expire the requested record now, with the request's reason (or `reason`)."""
        return self.send(_calls.decide_expiry(request_id, approve=True, reason=reason))

    def decline_expiry(self, request_id: str, reason: str) -> ExpiryRequest:
        return self.send(_calls.decide_expiry(request_id, approve=False, reason=reason))

    def report_recheck(self, memory_id: str, outcome: str, **fields: Any) -> RecheckAttempt:
        """Report a recheck outcome (observed_value, source_revision, source_ref, error)."""
        return self.send(_calls.report_recheck(memory_id, outcome, **fields))

    # --- Loaded contexts and notices -------------------------------------------------------------

    def load_context(
        self,
        session_id: str,
        memories: Iterable[BaseRef | Mapping[str, Any]],
        expires_at: datetime | str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
    ) -> ContextLoad:
        return self.send(
            _calls.load_context(session_id, memories, expires_at, project_id=project_id, agent_id=agent_id)
        )

    def notices(self, agent_id: str, status: Literal["open", "all"] = "open") -> list[Invalidation]:
        return self.send(_calls.notices(agent_id, status))

    def ack(self, agent_id: str, notice_id: str) -> Invalidation:
        return self.send(_calls.ack(agent_id, notice_id))

    # --- Derived items ---------------------------------------------------------------------------

    def create_summary(
        self, project_id: str, text: str, derived_from: Iterable[BaseRef | Mapping[str, Any]], kind: str = "text"
    ) -> Summary:
        return self.send(_calls.create_summary(project_id, text, derived_from, kind))

    def summary(self, summary_id: str) -> Summary:
        return self.send(_calls.summary(summary_id))

    def create_scheduled_action(
        self,
        project_id: str,
        kind: str,
        payload: Any,
        due_at: datetime | str,
        derived_from: Iterable[BaseRef | Mapping[str, Any]],
    ) -> ScheduledAction:
        return self.send(_calls.create_scheduled_action(project_id, kind, payload, due_at, derived_from))

    def scheduled_action(self, action_id: str) -> ScheduledAction:
        return self.send(_calls.scheduled_action(action_id))

    # --- Deletion --------------------------------------------------------------------------------

    def request_deletion(
        self,
        project_id: str,
        scope: Mapping[str, Any],
        reason: str,
        *,
        dry_run: bool = False,
        due_by: date | str | None = None,
        preview_id: str | None = None,
    ) -> DeletionReport | DeletionPreview:
        return self.send(
            _calls.request_deletion(project_id, scope, reason, dry_run=dry_run, due_by=due_by, preview_id=preview_id)
        )

    def deletion(self, request_id: str) -> DeletionReport:
        return self.send(_calls.deletion(request_id))

    def deletion_certificate(self, request_id: str) -> dict[str, Any]:
        """The signed certificate of a purge-confirmed deletion (compliance staff)."""
        return self.send(_calls.deletion_certificate(request_id))

    def receipt(self, receipt_id: str) -> dict[str, Any]:
        """The signed decision receipt a read for acting returned as `receipt_id`."""
        return self.send(_calls.receipt(receipt_id))


class AsyncClient:
    """The async twin of `Client`: the same methods, awaited; `records`/`disputes` are async iterators."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = _core.DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(transport=transport, **_http_options(base_url, token, timeout))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(call.method, _core.url_of(call), **_core.request_kwargs(call))
            except httpx.TransportError as exc:
                if not self.retry.retry_error(call, exc, attempt):
                    raise
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if self.retry.retry_response(response, attempt):
                await asyncio.sleep(self.retry.delay(attempt, response))
                continue
            return _core.result(call, response)

    async def _pages(self, call: Call[Any] | None) -> AsyncIterator[Any]:
        while call is not None:
            page = await self.send(call)
            for item in page["results"]:
                yield item
            call = _core.next_page(call, page)

    async def assert_fact(
        self,
        project_id: str,
        subject_id: str,
        predicate: str,
        value: Any,
        *,
        source_ref: str | None = None,
        source_revision: str | None = None,
        source: Mapping[str, Any] | None = None,
        valid_from: datetime | str | None = None,
        valid_to: datetime | str | None = None,
        expected_revision: int | None = None,
        derived_from: Iterable[BaseRef] | None = None,
        event_ids: Iterable[str] | None = None,
    ) -> AssertResult:
        return await self.send(
            _calls.assert_fact(
                project_id,
                subject_id,
                predicate,
                value,
                valid_from=valid_from,
                source_ref=source_ref,
                source_revision=source_revision,
                source=source,
                valid_to=valid_to,
                expected_revision=expected_revision,
                derived_from=derived_from,
                event_ids=event_ids,
            )
        )

    async def assert_facts(self, items: Iterable[Mapping[str, Any]], *, atomic: bool = False) -> BatchResult:
        """`Client.assert_facts`, awaited."""
        return await self.send(_calls.assert_facts(items, atomic=atomic))

    async def current(
        self,
        project_id: str,
        subject_id: str,
        predicate: str,
        purpose: Purpose = "answer",
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        session_id: str | None = None,
        context_expires_at: datetime | str | None = None,
    ) -> Fact:
        return await self.send(
            _calls.current(
                project_id, subject_id, predicate, purpose, valid_at, known_at, session_id, context_expires_at
            )
        )

    async def record(self, memory_id: str) -> Record:
        return await self.send(_calls.record(memory_id))

    async def history(self, memory_id: str) -> RecordHistory:
        return await self.send(_calls.history(memory_id))

    def records(self, **filters: Any) -> AsyncIterator[Record]:
        return self._pages(_calls.records(**filters))

    async def search(
        self,
        project_id: str | None,
        q: str,
        k: int = 10,
        include: Include = "usable",
        session_id: str | None = None,
        context_expires_at: datetime | str | None = None,
        *,
        subject_id: str | None = None,
        predicate: str | None = None,
    ) -> SearchResult:
        return await self.send(
            _calls.search(
                project_id,
                q,
                k,
                include,
                session_id,
                context_expires_at,
                subject_id=subject_id,
                predicate=predicate,
            )
        )

    def disputes(self, status: DisputeStatus = "open") -> AsyncIterator[Dispute]:
        return self._pages(_calls.disputes(status))

    async def resolve_dispute(
        self, dispute_id: str, *, winner: str | None = None, exclude_all: bool = False, reason: str = ""
    ) -> Dispute:
        return await self.send(
            _calls.resolve_dispute(dispute_id, winner=winner, exclude_all=exclude_all, reason=reason)
        )

    async def exclude(self, memory_id: str, reason: str) -> Record:
        return await self.send(_calls.exclude(memory_id, reason))

    async def expire(self, memory_id: str, reason: str, valid_to: datetime | str | None = None) -> Record:
        return await self.send(_calls.expire(memory_id, reason, valid_to))

    async def request_expiry(self, memory_id: str, reason: str) -> ExpiryRequest:
        return await self.send(_calls.request_expiry(memory_id, reason))

    async def expiry_requests(self, status: str = "pending") -> list[ExpiryRequest]:
        return (await self.send(_calls.expiry_requests(status)))["results"]

    async def approve_expiry(self, request_id: str, reason: str = "") -> ExpiryRequest:
        return await self.send(_calls.decide_expiry(request_id, approve=True, reason=reason))

    async def decline_expiry(self, request_id: str, reason: str) -> ExpiryRequest:
        return await self.send(_calls.decide_expiry(request_id, approve=False, reason=reason))

    async def report_recheck(self, memory_id: str, outcome: str, **fields: Any) -> RecheckAttempt:
        return await self.send(_calls.report_recheck(memory_id, outcome, **fields))

    async def load_context(
        self,
        session_id: str,
        memories: Iterable[BaseRef | Mapping[str, Any]],
        expires_at: datetime | str,
        *,
        project_id: str | None = None,
        agent_id: str | None = None,
    ) -> ContextLoad:
        return await self.send(
            _calls.load_context(session_id, memories, expires_at, project_id=project_id, agent_id=agent_id)
        )

    async def notices(self, agent_id: str, status: Literal["open", "all"] = "open") -> list[Invalidation]:
        return await self.send(_calls.notices(agent_id, status))

    async def ack(self, agent_id: str, notice_id: str) -> Invalidation:
        return await self.send(_calls.ack(agent_id, notice_id))

    async def create_summary(
        self, project_id: str, text: str, derived_from: Iterable[BaseRef | Mapping[str, Any]], kind: str = "text"
    ) -> Summary:
        return await self.send(_calls.create_summary(project_id, text, derived_from, kind))

    async def summary(self, summary_id: str) -> Summary:
        return await self.send(_calls.summary(summary_id))

    async def create_scheduled_action(
        self,
        project_id: str,
        kind: str,
        payload: Any,
        due_at: datetime | str,
        derived_from: Iterable[BaseRef | Mapping[str, Any]],
    ) -> ScheduledAction:
        return await self.send(_calls.create_scheduled_action(project_id, kind, payload, due_at, derived_from))

    async def scheduled_action(self, action_id: str) -> ScheduledAction:
        return await self.send(_calls.scheduled_action(action_id))

    async def request_deletion(
        self,
        project_id: str,
        scope: Mapping[str, Any],
        reason: str,
        *,
        dry_run: bool = False,
        due_by: date | str | None = None,
        preview_id: str | None = None,
    ) -> DeletionReport | DeletionPreview:
        return await self.send(
            _calls.request_deletion(project_id, scope, reason, dry_run=dry_run, due_by=due_by, preview_id=preview_id)
        )

    async def deletion(self, request_id: str) -> DeletionReport:
        return await self.send(_calls.deletion(request_id))

    async def deletion_certificate(self, request_id: str) -> dict[str, Any]:
        return await self.send(_calls.deletion_certificate(request_id))

    async def receipt(self, receipt_id: str) -> dict[str, Any]:
        return await self.send(_calls.receipt(receipt_id))
