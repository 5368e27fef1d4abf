"""`GovernedStore`: a LangGraph `BaseStore` whose memory is governed by the memory governance API.

Mapping (see `NamespaceMapping`): a namespace `(*prefix, subject)` → the configured project and that
subject; `key` → the predicate; `value` (a dict) → the fact's value. The principal is the API token.

- `put` asserts the fact with compare-and-swap on the revision this store last read for the key (it reads
  first when it has none). A 409/428 is raised, never retried as last-writer-wins; an outcome other than
  `created`/`unchanged` (a 202 `disputed`, a `history` write) is kept in `outcomes` and logged; a 410 raises.
- `put(value=None)` (LangGraph's `delete`) expires the current record with a reason — kept as history,
  never hard-deleted (a hard deletion is a compliance request). An owner or admin expires at once, and so does
  an agent that asserted the fact where the field's policy lets agents expire their own facts. Any other
  agent's delete files an expiry request an owner approves or declines (`outcomes` says `expiry_requested`
  with its id; nothing changes until then) and raises nothing. `manage_memory_tool` wraps LangMem's tool so
  that its answer to a delete says which of the two happened.
- `get` and `search` return only what may be used now (the index proposes, the database decides: `get` reads
  `facts/current`, `search` uses the governance facts each usable search hit carries, by the same rule); each
  item's value carries `_governance` (memory id, revision, status, freshness, last verified, caveat, action
  allowed). A disputed key comes back with `_governance.status == "disputed"` and both `candidates`, and
  no value of its own.
- What a read returns is registered as a context load (session `session_id`), so a later supersession sends
  this agent a notice: `pending_notices()` lists them, `acknowledge(notice_id)` applies one. The read itself
  registers it (`session_id` on `facts/current` and `search`, one call); what the server did not register
  (an older server, or a search whose hits are filtered here) is registered once per batch by
  `POST /context-loads/`.

The logic is written once as generators that yield API calls (`_core.Call`) and receive their results;
`batch` drives them with the sync `Client`, `abatch` with the `AsyncClient`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from memory_governance import _calls
from memory_governance._core import Call, next_page
from memory_governance.client import AsyncClient, Client
from memory_governance.errors import ApiError, ExpectedRevisionRequired, Forbidden, NotFound
from memory_governance.types import Fact, Invalidation, SearchHit, SearchResult

logger = logging.getLogger(__name__)

GOVERNANCE_KEY = "_governance"
DELETE_REASON = "Deleted through the LangGraph store; kept as history."
_MAX_K = 100  # the API's largest k

_R = TypeVar("_R")
# A plan yields the calls it needs, is sent their answers, and returns its result (an _R).
Plan = Generator[Call[Any], Any, _R]


@dataclass(frozen=True)
class NamespaceMapping:
    """Namespace ↔ (project, subject). A namespace is `prefix + subject labels`; several subject labels are
    joined with ":" (`("memories", "team-x", "alice")` → subject `team-x:alice`). Identifiers follow the
    API's character set (letters, digits, `_ . : @ + -`); LangGraph refuses "." in labels."""

    project_id: str
    prefix: tuple[str, ...] = ("memories",)

    def subject_of(self, namespace: tuple[str, ...]) -> str:
        n = len(self.prefix)
        if tuple(namespace[:n]) != self.prefix or len(namespace) == n:
            raise InvalidNamespaceError(f"Namespace {namespace!r} is not {self.prefix!r} followed by a subject.")
        return ":".join(namespace[n:])

    def namespace_of(self, subject: str) -> tuple[str, ...]:
        return (*self.prefix, *subject.split(":"))

    def subject_filter(self, namespace_prefix: tuple[str, ...]) -> str | None:
        """The subject a search prefix names (None: every subject of the project). A prefix outside this
        mapping raises InvalidNamespaceError."""
        n = len(self.prefix)
        if len(namespace_prefix) <= n:
            if tuple(namespace_prefix) != self.prefix[: len(namespace_prefix)]:
                raise InvalidNamespaceError(f"Namespace prefix {namespace_prefix!r} is outside {self.prefix!r}.")
            return None
        return self.subject_of(namespace_prefix)

    def matches(self, subject: str, wanted: str | None) -> bool:
        return wanted is None or subject == wanted or subject.startswith(wanted + ":")


@dataclass(frozen=True)
class PutOutcome:
    """What a put did, as the API answered: `created`, `unchanged`, `history` (kept, not current) or
    `disputed` (both kept, an owner must resolve `dispute_id`); for a delete `expired`, or `expiry_requested`
    (an owner must approve `request_id`; the record is unchanged until then)."""

    namespace: tuple[str, ...]
    key: str
    outcome: str
    memory_id: str
    revision: int
    dispute_id: str | None = None
    request_id: str | None = None


@dataclass
class _Loaded:
    refs: dict[str, int] = field(default_factory=dict)  # memory_id → revision, what this batch read


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_time(value: str | None) -> datetime:
    return datetime.fromisoformat(value) if value else _now()


class GovernedStore(BaseStore):
    """A LangGraph store on the memory governance API (see the module docstring for the rules)."""

    supports_ttl = False

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        project_id: str,
        prefix: tuple[str, ...] = ("memories",),
        mapping: NamespaceMapping | None = None,
        source_ref: str = "langgraph-store",
        session_id: str | None = None,
        agent_id: str | None = None,
        context_ttl: timedelta = timedelta(hours=12),
        register_loads: bool = True,
        delete_reason: str = DELETE_REASON,
        client: Client | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.base_url = base_url
        self._token = token
        self._timeout = timeout
        self.mapping = mapping or NamespaceMapping(project_id, prefix)
        self.source_ref = source_ref
        self.session_id = session_id or f"langgraph-{uuid.uuid4().hex[:16]}"
        self.agent_id = agent_id
        self.context_ttl = context_ttl
        self.register_loads = register_loads
        self.delete_reason = delete_reason
        self.client = client or Client(base_url, token, timeout=timeout)
        self._aclients: dict[int, AsyncClient] = {}
        self._lock = threading.Lock()
        # (subject, predicate) → (memory_id, revision) of what this store last read or wrote: the CAS base.
        self._seen: dict[tuple[str, str], tuple[str, int]] = {}
        self.outcomes: list[PutOutcome] = []

    # --- BaseStore ---------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._drive(self._batch_plan(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._adrive(self._batch_plan(list(ops)))

    # --- Notices -----------------------------------------------------------------------------------

    def pending_notices(self, *, all_sessions: bool = False) -> list[Invalidation]:
        """Open notices for what this store loaded (every session of the agent with `all_sessions`). The
        store keeps its CAS base until the node reads the key again: a put before that re-read is a 409."""
        return self._drive(self._notices_plan(all_sessions))

    async def apending_notices(self, *, all_sessions: bool = False) -> list[Invalidation]:
        return await self._adrive(self._notices_plan(all_sessions))

    def acknowledge(self, notice_id: str) -> Invalidation:
        """Mark a notice applied (after the node refreshed what it holds)."""
        return self._drive(self._ack_plan(notice_id))

    async def aacknowledge(self, notice_id: str) -> Invalidation:
        return await self._adrive(self._ack_plan(notice_id))

    def close(self) -> None:
        self.client.close()

    # --- Drivers: the same plans over the sync and the async client ---------------------------------

    def _drive(self, plan: Plan[_R]) -> _R:
        try:
            call = next(plan)
            while True:
                try:
                    answer = self.client.send(call)
                except ApiError as exc:
                    call = plan.throw(exc)
                else:
                    call = plan.send(answer)
        except StopIteration as done:
            result: _R = done.value  # what the plan returned
            return result

    async def _adrive(self, plan: Plan[_R]) -> _R:
        client = self._aclient()
        try:
            call = next(plan)
            while True:
                try:
                    answer = await client.send(call)
                except ApiError as exc:
                    call = plan.throw(exc)
                else:
                    call = plan.send(answer)
        except StopIteration as done:
            result: _R = done.value  # what the plan returned
            return result

    def _aclient(self) -> AsyncClient:
        # An httpx.AsyncClient's connections belong to the event loop that opened them: one client per loop.
        loop = id(asyncio.get_running_loop())
        with self._lock:
            if loop not in self._aclients:
                self._aclients[loop] = AsyncClient(self.base_url, self._token, timeout=self._timeout)
            return self._aclients[loop]

    # --- Plans -------------------------------------------------------------------------------------

    def _batch_plan(self, ops: list[Op]) -> Plan[list[Result]]:
        loaded = _Loaded()
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append((yield from self._get_plan(op, loaded)))
            elif isinstance(op, SearchOp):
                results.append((yield from self._search_plan(op, loaded)))
            elif isinstance(op, PutOp):
                yield from self._put_plan(op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append((yield from self._list_namespaces_plan(op)))
            else:
                raise TypeError(f"Unknown store operation {op!r}")
        if loaded.refs and self.register_loads:
            load = yield _calls.load_context(
                self.session_id,
                [{"memory_id": m, "revision": r} for m, r in loaded.refs.items()],
                _now() + self.context_ttl,
                project_id=self.mapping.project_id,
            )
            self.agent_id = self.agent_id or load["agent_id"]
        return results

    def _fact_plan(self, subject: str, predicate: str, *, register: bool = False) -> Plan[Any]:
        """The current fact, or None when nothing may be used (never recorded, expired, excluded, deleted).
        With `register`, the server registers what it returns as a context load in the same call."""
        try:
            fact: Fact = yield _calls.current(
                self.mapping.project_id, subject, predicate, **(self._on_read() if register else {})
            )
        except NotFound:
            return None
        return fact

    def _on_read(self) -> dict[str, Any]:
        """The parameters that make a read register what it returns (none when loads are not registered)."""
        if not self.register_loads:
            return {}
        return {"session_id": self.session_id, "context_expires_at": _now() + self.context_ttl}

    def _registered_by_read(self, answer: Fact | SearchResult) -> bool:
        """Whether the server registered the read's load itself (an older server leaves `context_load` out)."""
        if "context_load" not in answer:
            return False
        load = answer["context_load"]
        if load is not None and self.agent_id is None:
            self.agent_id = load["agent_id"]
        return True

    def _get_plan(self, op: GetOp, loaded: _Loaded) -> Plan[Any]:
        subject = self.mapping.subject_of(op.namespace)
        fact = yield from self._fact_plan(subject, op.key, register=True)
        if fact is None:
            return None
        if not self._registered_by_read(fact):
            loaded.refs.update(_refs_of(fact))
        return self._item(Item, op.namespace, op.key, fact)

    def _item(self, cls: type[Any], namespace: tuple[str, ...], key: str, fact: Fact, **extra: Any) -> Any:
        """An Item (or SearchItem) of a fact: its value, plus the governance facts under `_governance`."""
        governance: dict[str, Any] = {
            "memory_id": fact["memory_id"],
            "revision": fact["revision"],
            "status": fact["status"],
            "freshness": fact["freshness"],
            "last_verified_at": fact["last_verified_at"],
            "last_verified_value": fact["last_verified_value"],
            "recheck_after": fact["recheck_after"],
            "caveat": fact["caveat"],
            "action_allowed": fact["action_allowed"],
            "source": fact["source"],
        }
        if fact["status"] == "disputed":
            # Both sides, marked as disputed; no value is invented for the key.
            governance["dispute_id"] = fact["dispute_id"]
            governance["candidates"] = [
                {"memory_id": c["memory_id"], "revision": c["revision"], "value": c["value"], "source": c["source"]}
                for c in fact["candidates"]
            ]
            value: dict[str, Any] = {}
            with self._lock:
                self._seen.pop((fact["subject_id"], fact["predicate"]), None)
        else:
            stored = fact["value"]
            value = dict(stored) if isinstance(stored, dict) else {"value": stored}
            assert fact["memory_id"] is not None and fact["revision"] is not None
            with self._lock:
                self._seen[(fact["subject_id"], fact["predicate"])] = (fact["memory_id"], fact["revision"])
        value[GOVERNANCE_KEY] = governance
        when = _parse_time(fact["valid_from"] or (fact["candidates"][0]["valid_from"] if fact["candidates"] else None))
        return cls(namespace=namespace, key=key, value=value, created_at=when, updated_at=when, **extra)

    def _put_plan(self, op: PutOp) -> Plan[Any]:
        subject = self.mapping.subject_of(op.namespace)
        key = (subject, op.key)
        with self._lock:
            seen = self._seen.get(key)
        if op.value is None:
            yield from self._delete_plan(op, subject, seen)
            return
        value = {k: v for k, v in op.value.items() if k != GOVERNANCE_KEY}
        read_first = seen is None
        if read_first:
            fact = yield from self._fact_plan(subject, op.key)
            if fact is not None and fact["memory_id"] is not None:
                seen = (fact["memory_id"], fact["revision"] or 0)
        now = _now()
        call = _calls.assert_fact(
            self.mapping.project_id,
            subject,
            op.key,
            value,
            valid_from=now,
            source_ref=self.source_ref,
            source_revision=now.isoformat(),  # ISO timestamps order: a later put from this source is newer
            expected_revision=seen[1] if seen else None,
        )
        try:
            answer = yield call
        except ExpectedRevisionRequired as exc:
            # Only after a read that found no usable value: the fact's head is expired or excluded (nothing
            # the agent would overwrite). A head that is current or disputed is never written over.
            head = exc.current
            if not (read_first and seen is None and head and head["status"] in ("expired", "excluded")):
                raise
            answer = yield _calls.assert_fact(
                self.mapping.project_id,
                subject,
                op.key,
                value,
                valid_from=now,
                source_ref=self.source_ref,
                source_revision=now.isoformat(),
                expected_revision=head["revision"],
            )
        outcome = PutOutcome(
            op.namespace, op.key, answer["outcome"], answer["memory_id"], answer["revision"], answer.get("dispute_id")
        )
        with self._lock:
            if outcome.outcome in ("created", "unchanged"):
                self._seen[key] = (answer["memory_id"], answer["revision"])
            else:
                self._seen.pop(key, None)  # not the current belief: the next put reads again
            self.outcomes.append(outcome)
        if outcome.outcome not in ("created", "unchanged"):
            logger.warning(
                "put %s/%s was stored as %s (memory %s)%s",
                "/".join(op.namespace),
                op.key,
                outcome.outcome,
                outcome.memory_id,
                f"; dispute {outcome.dispute_id} awaits an owner" if outcome.dispute_id else "",
            )

    def _delete_plan(self, op: PutOp, subject: str, seen: tuple[str, int] | None) -> Plan[Any]:
        """LangGraph's delete: expire the record this store read (or the current one), kept as history."""
        if seen is None:
            fact = yield from self._fact_plan(subject, op.key)
            if fact is None or fact["memory_id"] is None:
                return  # nothing usable to delete (a disputed fact is an owner's to resolve)
            seen = (fact["memory_id"], fact["revision"] or 0)
        try:
            record = yield _calls.expire(seen[0], self.delete_reason)
        except Forbidden:
            # Not this principal's to expire (an agent, where the field's policy does not let agents expire their
            # own facts): the governed way is a request an owner decides. Nothing changes until then.
            filed = yield _calls.request_expiry(seen[0], self.delete_reason)
            outcome = PutOutcome(
                op.namespace, op.key, "expiry_requested", filed["memory_id"], filed["revision"], request_id=filed["id"]
            )
            logger.info("delete of %s/%s filed expiry request %s for an owner", subject, op.key, filed["id"])
            with self._lock:
                self.outcomes.append(outcome)
            return
        with self._lock:
            self._seen[(subject, op.key)] = (record["memory_id"], record["revision"])
            self.outcomes.append(PutOutcome(op.namespace, op.key, "expired", record["memory_id"], record["revision"]))

    def _search_plan(self, op: SearchOp, loaded: _Loaded) -> Plan[Any]:
        wanted = self.mapping.subject_filter(op.namespace_prefix)
        needed = op.offset + op.limit
        # (subject, predicate, score, the hit's governance facts if the search carried them), best first
        candidates: list[_Proposed] = []
        registered = False
        if op.query:
            # The namespace's subject narrows the search on the server (its index query and its records); a value
            # filter is applied here, so ask for more than needed then.
            k = min(_MAX_K, needed * (5 if op.filter else 1))
            # The server registers every usable hit: only when this store returns them all (no filter here,
            # nothing skipped), else what is returned is registered after the batch.
            exact = not op.filter and op.offset == 0 and k == op.limit
            found = yield _calls.search(
                self.mapping.project_id,
                op.query,
                k,
                "usable",
                subject_id=wanted,
                **(self._on_read() if exact else {}),
            )
            registered = exact and self._registered_by_read(found)
            for hit in found["results"]:
                if hit["usable"] and self.mapping.matches(hit["subject_id"], wanted):
                    candidates.append((hit["subject_id"], hit["predicate"], hit["score"], _fact_of_hit(hit)))
        else:
            filters: dict[str, Any] = {
                "project_id": self.mapping.project_id,
                "status": "accepted",
                "valid_at": _now(),
                "page_size": min(200, max(needed * 2, 10)),
            }
            if wanted is not None and ":" not in wanted:
                filters["subject_id"] = wanted
            page_call: Call[Any] | None = _calls.records(**filters)
            while page_call is not None and len(candidates) < needed * 3:
                page = yield page_call
                for rec in page["results"]:
                    if self.mapping.matches(rec["subject_id"], wanted):
                        candidates.append((rec["subject_id"], rec["predicate"], None, None))
                page_call = next_page(page_call, page)
        # The database decides: each key's current answer, in the order the index proposed them. A usable
        # search hit already carries what `facts/current` says of it (the server's same rule, decided at the
        # search's instant); a record listing (or an older server's hit) is read through `facts/current`.
        items: list[SearchItem] = []
        skipped = 0
        for subject, predicate, score, known in _unique(candidates):
            if len(items) >= op.limit:
                break
            fact = known if known is not None else (yield from self._fact_plan(subject, predicate))
            if fact is None:
                continue
            item = self._item(SearchItem, self.mapping.namespace_of(subject), predicate, fact, score=score)
            if op.filter and not all(item.value.get(k) == v for k, v in op.filter.items()):
                continue
            if skipped < op.offset:
                skipped += 1
                continue
            if not (registered and known is not None):
                loaded.refs.update(_refs_of(fact))  # registered: what is returned, not what was skipped
            items.append(item)
        return items

    def _list_namespaces_plan(self, op: ListNamespacesOp) -> Plan[Any]:
        seen: dict[tuple[str, ...], None] = {}
        page_call: Call[Any] | None = _calls.records(
            project_id=self.mapping.project_id, status="accepted", valid_at=_now(), page_size=200
        )
        while page_call is not None and len(seen) < op.offset + op.limit:
            page = yield page_call
            for rec in page["results"]:
                namespace = self.mapping.namespace_of(rec["subject_id"])
                if not _namespace_matches(namespace, op.match_conditions):
                    continue
                if op.max_depth is not None:
                    namespace = namespace[: op.max_depth]
                seen.setdefault(namespace, None)
            page_call = next_page(page_call, page)
        return list(seen)[op.offset : op.offset + op.limit]

    def _notices_plan(self, all_sessions: bool) -> Plan[list[Invalidation]]:
        if self.agent_id is None:
            return []  # nothing was loaded through this store yet
        notices: list[Invalidation] = yield _calls.notices(self.agent_id)
        if not all_sessions:
            notices = [n for n in notices if n["session_id"] == self.session_id]
        return notices

    def _ack_plan(self, notice_id: str) -> Plan[Invalidation]:
        if self.agent_id is None:
            raise ValueError("This store has loaded nothing yet, so it has no notices; pass agent_id=... to ack.")
        notice: Invalidation = yield _calls.ack(self.agent_id, notice_id)
        return notice


def _refs_of(fact: Fact) -> dict[str, int]:
    """What reading `fact` loads into a context: its record, or both candidates of a dispute."""
    if fact["memory_id"] is not None and fact["revision"] is not None:
        return {fact["memory_id"]: fact["revision"]}
    return {c["memory_id"]: c["revision"] for c in fact["candidates"]}


def _fact_of_hit(hit: SearchHit) -> Fact | None:
    """A usable search hit as `facts/current` renders its fact (None when the server sent no governance facts)."""
    if hit.get("action_allowed") is None:
        return None
    return {
        "project_id": hit["project_id"],
        "subject_id": hit["subject_id"],
        "predicate": hit["predicate"],
        "value": hit["value"],
        "memory_id": hit["memory_id"],
        "status": hit["status"],
        "revision": hit["revision"],
        "freshness": hit["freshness"],
        "last_verified_at": hit["last_verified_at"],
        "last_verified_value": hit["last_verified_value"],
        "recheck_after": hit["recheck_after"],
        "valid_from": hit["valid_from"],
        "valid_to": hit["valid_to"],
        "source": hit["source"],
        "caveat": hit["caveat"],
        "action_allowed": bool(hit["action_allowed"]),
        "candidates": [],
        "dispute_id": None,
    }


_Proposed = tuple[str, str, float | None, Fact | None]


def _unique(candidates: list[_Proposed]) -> Iterable[_Proposed]:
    keys: set[tuple[str, str]] = set()
    for subject, predicate, score, known in candidates:
        if (subject, predicate) not in keys:
            keys.add((subject, predicate))
            yield subject, predicate, score, known


def _namespace_matches(namespace: tuple[str, ...], conditions: tuple[MatchCondition, ...] | None) -> bool:
    for condition in conditions or ():
        path = tuple(condition.path)
        part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
        if len(part) != len(path) or any(p != "*" and p != n for p, n in zip(path, part, strict=True)):
            return False
    return True


def manage_memory_tool(namespace: tuple[str, ...] | str, *, store: GovernedStore, **options: Any) -> Any:
    """LangMem's `create_manage_memory_tool` over `store`, with its answer to a delete true to what happened.

    LangMem answers "Deleted memory <id>" whenever the store's delete returns. Over a GovernedStore an agent's
    delete may instead have filed an expiry request an owner must approve (the memory stays in use until then);
    this tool then answers that, with the request's id, so the model does not believe the memory is gone.
    `options` are LangMem's own (instructions, schema, actions_permitted, name). Needs `langmem` installed."""
    from langmem import create_manage_memory_tool

    tool = create_manage_memory_tool(namespace, store=store, **options)
    sync_body, async_body = tool.func, tool.coroutine

    def told(before: int, answer: Any) -> Any:
        with store._lock:
            requested = [o for o in store.outcomes[before:] if o.outcome == "expiry_requested"]
        if not requested:
            return answer
        return (
            f"Not deleted yet: asked an owner to expire memory {requested[-1].key} (expiry request "
            f"{requested[-1].request_id}). It stays in use until an owner approves; do not rely on it being gone."
        )

    def sync_tool(*args: Any, **kwargs: Any) -> Any:
        before = len(store.outcomes)
        return told(before, sync_body(*args, **kwargs))

    async def async_tool(*args: Any, **kwargs: Any) -> Any:
        before = len(store.outcomes)
        return told(before, await async_body(*args, **kwargs))

    tool.func = sync_tool if sync_body is not None else None
    tool.coroutine = async_tool if async_body is not None else None
    return tool
