"""Typed results: the API's JSON answers as TypedDicts, named after the OpenAPI schema's components
(`/api/v1/schema/`) they match. Datetimes are ISO 8601 strings, as the API sends them."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Status = Literal["accepted", "superseded", "disputed", "excluded", "expired"]
Freshness = Literal["fresh", "recheck_due", "never_verified"]
Outcome = Literal["created", "history", "unchanged", "disputed"]
RecheckOutcome = Literal[
    "verified_unchanged", "verified_changed", "source_unavailable", "source_ambiguous", "not_checked"
]


class SourceOut(TypedDict):
    canonical_ref: str
    revision: str
    issuer_principal_id: str
    event_ids: list[str]


class BaseRef(TypedDict):
    """A base of a derived item or a loaded memory: `{memory_id, revision}`."""

    memory_id: str
    revision: int


class Record(TypedDict):
    memory_id: str
    project_id: str
    subject_id: str
    predicate: str
    value: Any
    status: Status
    valid_from: str
    valid_to: str | None
    recorded_from: str
    recorded_to: str | None
    last_verified_at: str | None
    recheck_after: str | None
    retain_until: str | None
    revision: int
    source: SourceOut
    supersedes: list[str]
    superseded_by: str | None
    derived_from: Any
    status_reason: str


class AssertResult(Record):
    """`POST /records/`: the record, what the write did (`outcome`), and the dispute it opened, if any."""

    outcome: Outcome
    dispute_id: NotRequired[str]


class BatchItem(TypedDict):
    """One item's result in a batch: what `POST /records/` would have answered for it, by `index` in the request:
    `record` when it was written or kept (`outcome` created, history, unchanged, disputed), `error` ({code, detail,
    ...}) when it was refused (`outcome` the error's code)."""

    index: int
    status: int
    outcome: str
    record: NotRequired[AssertResult]
    error: NotRequired[dict[str, Any]]


class BatchResult(TypedDict):
    """`POST /records/batch/`: a result per item in order, how many ended each way, and whether it was applied."""

    results: list[BatchItem]
    counts: dict[str, int]
    applied: bool


class RecordHistory(TypedDict):
    memory_id: str
    results: list[Record]


class Candidate(TypedDict):
    memory_id: str
    value: Any
    revision: int
    valid_from: str
    recorded_from: str
    source: SourceOut


class Fact(TypedDict):
    """`GET /facts/current/`: the value an agent may use, with its freshness and caveat; a disputed fact
    has `value` null and its `candidates`."""

    project_id: str
    subject_id: str
    predicate: str
    value: Any
    memory_id: str | None
    status: str
    revision: int | None
    freshness: Freshness | None
    last_verified_at: str | None
    last_verified_value: Any
    recheck_after: str | None
    valid_from: str | None
    valid_to: str | None
    source: SourceOut | None
    caveat: str | None
    action_allowed: bool
    candidates: list[Candidate]
    dispute_id: str | None
    # With `session_id` (servers that register on read): the context load of this answer, null when nothing
    # usable was returned. Absent without session_id, or from an older server.
    context_load: NotRequired[ContextLoadRef | None]
    # With `purpose="action"`: the signed decision receipt of this read (`Client.receipt`). Absent otherwise.
    receipt_id: NotRequired[str]


class ContextLoadRef(TypedDict):
    """The context load a read with `session_id` registered."""

    id: str
    agent_id: str
    session_id: str
    expires_at: str


class Dispute(TypedDict):
    id: str
    project_id: str
    subject_id: str
    predicate: str
    status: Literal["open", "resolved"]
    opened_at: str
    resolved_at: str | None
    resolved_by: str | None
    winner: str | None
    reason: str
    candidates: list[Candidate]


class ExpiryRequest(TypedDict):
    """An agent's ask that a record be expired, decided by an owner or admin (`/records/{id}/expiry-requests/`)."""

    id: str
    memory_id: str
    revision: int
    project_id: str
    subject_id: str
    predicate: str
    status: Literal["pending", "approved", "declined"]
    reason: str
    requested_by: str
    created_at: str
    decided_at: str | None
    decided_by: str | None
    decision_reason: str
    created: NotRequired[bool]  # on filing: False when a request for the record was already pending


class RecheckAttempt(TypedDict):
    id: int
    memory_id: str
    outcome: RecheckOutcome
    trigger: str
    observed_value: Any
    source_revision: str
    source_ref: str
    duration_ms: int
    error: str
    reporter: str | None
    new_memory_id: str | None
    attempted_at: str


class SearchHit(TypedDict):
    memory_id: str
    project_id: str
    subject_id: str
    predicate: str
    value: Any
    status: str
    revision: int
    # Cosine similarity in [-1, 1] (higher is closer) for a `match` of "vector"; None for "keyword" (written a moment
    # ago, not embedded yet, found by its words). `rank`: 1-based place in the answer.
    score: float | None
    match: Literal["vector", "keyword"]
    rank: int
    usable: bool
    current_memory_id: str | None
    current_value: Any
    reason_code: str | None
    reason: str | None
    valid_from: str
    valid_to: str | None
    recheck_after: str | None
    source: SourceOut
    # What `GET /facts/current/` says of a usable hit (same rule, same instant); null on a held-back hit.
    freshness: Freshness | None
    last_verified_at: str | None
    last_verified_value: Any
    caveat: str | None
    action_allowed: bool | None


class Embedder(TypedDict):
    name: str
    fallback: bool  # true: the model could not load on the server and words, not meaning, ranked the hits
    detail: str | None


class SearchResult(TypedDict):
    results: list[SearchHit]
    embedder: NotRequired[Embedder]  # which embedder ranked the hits (older servers leave it out)
    context_load: NotRequired[ContextLoadRef | None]  # as on Fact: the usable hits registered, with session_id


class ContextLoad(TypedDict):
    id: str
    agent_id: str
    session_id: str
    loaded_at: str
    expires_at: str
    memories: list[BaseRef]
    open_invalidations: list[str]


class Invalidation(TypedDict):
    id: str
    memory_id: str
    revision: int
    session_id: str
    context_load_id: str
    reason: str
    current_memory_id: str | None
    created_at: str
    acknowledged_at: str | None


class InvalidationList(TypedDict):
    agent_id: str
    results: list[Invalidation]


class Summary(TypedDict):
    id: str
    project_id: str
    kind: str
    text: str
    derived_from: Any
    status: Literal["current", "stale", "suspended", "withdrawn"]
    status_reason: str
    status_changed_at: str | None
    created_at: str
    created_by: str
    replaces: str | None


class ScheduledAction(TypedDict):
    id: str
    project_id: str
    kind: str
    payload: Any
    due_at: str
    derived_from: Any
    status: str
    status_reason: str
    status_changed_at: str | None
    agent_id: str
    created_at: str


class DeletionStages(TypedDict):
    accepted_at: str | None
    removed_from_reads_at: str | None
    purge_confirmed_at: str | None
    backups_expire_at: str | None


class StoreProgress(TypedDict):
    store: str
    state: str
    found: int
    hidden: int
    purged: int
    remaining: int | None
    attempts: int
    last_error: str
    verified_at: str | None
    evidence: Any


class DeletionReport(TypedDict):
    """A deletion request's report: four stages kept apart, and each store's progress."""

    id: str
    project_id: str
    scope: dict[str, Any]
    reason: str
    # True when values of the scope were cut out of `reason` (replaced by "[redacted]") before it was kept.
    reason_redacted: bool
    due_by: str | None
    state: str
    requested_by: str
    approved_by: str | None
    stages: DeletionStages
    backups_note: str
    stores: list[StoreProgress]
    statement: str
    preview: NotRequired[dict[str, Any]]


class DeletionPreview(TypedDict):
    """A dry run's answer: what each store holds, and the `preview_id` to cite when filing."""

    dry_run: bool
    preview_id: str
    preview_expires_at: str | None
    stores: list[dict[str, Any]]
