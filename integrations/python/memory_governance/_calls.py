"""Every API method once, as a `Call` (path, parameters, body, result type). `Client` and `AsyncClient`
send the same calls; paths, parameter names and bodies follow PRODUCT.md's API contract."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date, datetime
from typing import Any, Literal, cast
from urllib.parse import quote

from memory_governance._core import Call, iso
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
    InvalidationList,
    RecheckAttempt,
    Record,
    RecordHistory,
    ScheduledAction,
    SearchResult,
    Summary,
)

Purpose = Literal["answer", "action"]
Include = Literal["usable", "all"]


def _seg(value: str) -> str:
    return quote(str(value), safe="")


def _refs(items: Iterable[BaseRef | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"memory_id": i["memory_id"], "revision": int(i["revision"])} for i in items]


def assert_fact(project_id: str, subject_id: str, predicate: str, value: Any, **fields: Any) -> Call[AssertResult]:
    """`POST /records/` with the body `fact_body` builds from the same arguments."""
    return Call("POST", "records/", body=fact_body(project_id, subject_id, predicate, value, **fields))


def fact_body(
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
) -> dict[str, Any]:
    """The body of `POST /records/` (and of one batch item) in the API contract's shape. The source is given once:
    flat (`source_ref`, `source_revision`) or as the record shape nests it (`source={"canonical_ref": ...,
    "revision": ..., "event_ids": [...]}`), so a line of an import file can be passed as it is
    (`fact_body(**line)`). Without `valid_from` the server takes the time of the request."""
    body: dict[str, Any] = {
        "project_id": project_id,
        "subject_id": subject_id,
        "predicate": predicate,
        "value": value,
        "source": _source(source_ref, source_revision, source),
    }
    if valid_from is not None:
        body["valid_from"] = iso(valid_from)
    if valid_to is not None:
        body["valid_to"] = iso(valid_to)
    if expected_revision is not None:
        body["expected_revision"] = expected_revision
    if derived_from:
        body["derived_from"] = _refs(derived_from)
    if event_ids:
        body["source"]["event_ids"] = [*body["source"].get("event_ids", []), *event_ids]
    return body


def _source(ref: str | None, revision: str | None, nested: Mapping[str, Any] | None) -> dict[str, Any]:
    if nested is not None:
        if ref is not None or revision is not None:
            raise ValueError(
                "Give the source once: source={canonical_ref, revision} or source_ref and source_revision."
            )
        return dict(nested)
    if ref is None or revision is None:
        raise ValueError(
            "A fact needs its source: source_ref and source_revision (or source={canonical_ref, revision})."
        )
    return {"canonical_ref": ref, "revision": revision}


def assert_facts(items: Iterable[Mapping[str, Any]], *, atomic: bool = False) -> Call[BatchResult]:
    """`POST /records/batch/`. Each item is a `POST /records/` body (`fact_body` builds one; the flat `source_ref`
    and `source_revision` are accepted too); `valid_from` may be left out (the time of the request)."""
    return Call("POST", "records/batch/", body={"items": [dict(item) for item in items], "atomic": atomic})


def current(
    project_id: str,
    subject_id: str,
    predicate: str,
    purpose: Purpose = "answer",
    valid_at: datetime | str | None = None,
    known_at: datetime | str | None = None,
    session_id: str | None = None,
    context_expires_at: datetime | str | None = None,
) -> Call[Fact]:
    """With `session_id`, the server registers the answer's record(s) as a context load of the caller in the
    same request (`context_load` in the answer; an older server ignores it and leaves the field out)."""
    params = {
        "project_id": project_id,
        "subject_id": subject_id,
        "predicate": predicate,
        "purpose": purpose,
        "valid_at": valid_at,
        "known_at": known_at,
        "session_id": session_id,
        "context_expires_at": context_expires_at,
    }
    return Call("GET", "facts/current/", params)


def record(memory_id: str) -> Call[Record]:
    return Call("GET", f"records/{_seg(memory_id)}/")


def history(memory_id: str) -> Call[RecordHistory]:
    return Call("GET", f"records/{_seg(memory_id)}/history/")


def records(**filters: Any) -> Call[Any]:
    """A page of `GET /records/` (filters: project_id, subject_id, predicate, status, valid_at, known_at,
    page_size)."""
    return Call("GET", "records/", filters)


def search(
    project_id: str | None,
    q: str,
    k: int = 10,
    include: Include = "usable",
    session_id: str | None = None,
    context_expires_at: datetime | str | None = None,
    *,
    subject_id: str | None = None,
    predicate: str | None = None,
) -> Call[SearchResult]:
    """With `session_id`, the usable hits are registered as a context load (as `current`). `subject_id` and
    `predicate` narrow the search on the server."""
    params = {
        "project_id": project_id,
        "subject_id": subject_id,
        "predicate": predicate,
        "q": q,
        "k": k,
        "include": include,
        "session_id": session_id,
        "context_expires_at": context_expires_at,
    }
    return Call("GET", "search/", params)


def disputes(status: Literal["open", "resolved", "all"] = "open") -> Call[Any]:
    return Call("GET", "disputes/", {"status": status})


def resolve_dispute(
    dispute_id: str, *, winner: str | None = None, exclude_all: bool = False, reason: str = ""
) -> Call[Dispute]:
    body: dict[str, Any] = {"exclude_all": exclude_all, "reason": reason}
    if winner is not None:
        body["winner"] = winner
    return Call("POST", f"disputes/{_seg(dispute_id)}/resolve/", body=body)


def exclude(memory_id: str, reason: str) -> Call[Record]:
    return Call("POST", f"records/{_seg(memory_id)}/exclude/", body={"reason": reason})


def expire(memory_id: str, reason: str, valid_to: datetime | str | None = None) -> Call[Record]:
    body: dict[str, Any] = {"reason": reason}
    if valid_to is not None:
        body["valid_to"] = iso(valid_to)
    return Call("POST", f"records/{_seg(memory_id)}/expire/", body=body)


def request_expiry(memory_id: str, reason: str) -> Call[ExpiryRequest]:
    """`POST /records/{memory_id}/expiry-requests/`: ask an owner to expire the record (201, or 200 when one is
    already pending); nothing changes until an owner approves."""
    return Call("POST", f"records/{_seg(memory_id)}/expiry-requests/", body={"reason": reason})


def expiry_requests(status: str = "pending") -> Call[dict[str, list[ExpiryRequest]]]:
    return Call("GET", "expiry-requests/", {"status": status})


def decide_expiry(request_id: str, *, approve: bool, reason: str = "") -> Call[ExpiryRequest]:
    verb = "approve" if approve else "decline"
    return Call("POST", f"expiry-requests/{_seg(request_id)}/{verb}/", body={"reason": reason})


def report_recheck(
    memory_id: str,
    outcome: str,
    *,
    observed_value: Any = None,
    source_revision: str = "",
    source_ref: str = "",
    error: str = "",
) -> Call[RecheckAttempt]:
    body = {
        "outcome": outcome,
        "observed_value": observed_value,
        "source_revision": source_revision,
        "source_ref": source_ref,
        "error": error,
    }
    return Call("POST", f"records/{_seg(memory_id)}/rechecks/", body=body)


def load_context(
    session_id: str,
    memories: Iterable[BaseRef | Mapping[str, Any]],
    expires_at: datetime | str,
    *,
    project_id: str | None = None,
    agent_id: str | None = None,
) -> Call[ContextLoad]:
    body: dict[str, Any] = {"session_id": session_id, "memories": _refs(memories), "expires_at": iso(expires_at)}
    if project_id is not None:
        body["project_id"] = project_id
    if agent_id is not None:
        body["agent_id"] = agent_id
    return Call("POST", "context-loads/", body=body)


def notices(agent_id: str, status: Literal["open", "all"] = "open") -> Call[list[Invalidation]]:
    return Call(
        "GET",
        f"agents/{_seg(agent_id)}/invalidations/",
        {"status": status},
        parse=lambda data: cast(InvalidationList, data)["results"],
    )


def ack(agent_id: str, notice_id: str) -> Call[Invalidation]:
    return Call("POST", f"agents/{_seg(agent_id)}/invalidations/{_seg(notice_id)}/ack/", body={})


def create_summary(
    project_id: str, text: str, derived_from: Iterable[BaseRef | Mapping[str, Any]], kind: str = "text"
) -> Call[Summary]:
    body = {"project_id": project_id, "text": text, "derived_from": _refs(derived_from), "kind": kind}
    return Call("POST", "summaries/", body=body)


def summary(summary_id: str) -> Call[Summary]:
    return Call("GET", f"summaries/{_seg(summary_id)}/")


def create_scheduled_action(
    project_id: str,
    kind: str,
    payload: Any,
    due_at: datetime | str,
    derived_from: Iterable[BaseRef | Mapping[str, Any]],
) -> Call[ScheduledAction]:
    body = {
        "project_id": project_id,
        "kind": kind,
        "payload": payload,
        "due_at": iso(due_at),
        "derived_from": _refs(derived_from),
    }
    return Call("POST", "scheduled-actions/", body=body)


def scheduled_action(action_id: str) -> Call[ScheduledAction]:
    return Call("GET", f"scheduled-actions/{_seg(action_id)}/")


def request_deletion(
    project_id: str,
    scope: Mapping[str, Any],
    reason: str,
    *,
    dry_run: bool = False,
    due_by: date | str | None = None,
    preview_id: str | None = None,
) -> Call[DeletionReport | DeletionPreview]:
    body: dict[str, Any] = {"project_id": project_id, "scope": dict(scope), "reason": reason, "dry_run": dry_run}
    if due_by is not None:
        body["due_by"] = due_by if isinstance(due_by, str) else due_by.isoformat()
    if preview_id is not None:
        body["preview_id"] = preview_id
    return Call("POST", "deletion-requests/", body=body)


def deletion(request_id: str) -> Call[DeletionReport]:
    return Call("GET", f"deletion-requests/{_seg(request_id)}/")


def deletion_certificate(request_id: str) -> Call[dict[str, Any]]:
    """The signed deletion certificate (compliance staff; 409 `certificate_not_ready` before the purge is
    confirmed); verify it offline with `memory_governance.cli` (`memory-governance verify`)."""
    return Call("GET", f"deletion-requests/{_seg(request_id)}/certificate/")


def receipt(receipt_id: str) -> Call[dict[str, Any]]:
    """A decision receipt of a read for acting (the reader, owners and compliance staff)."""
    return Call("GET", f"receipts/{_seg(receipt_id)}/")
