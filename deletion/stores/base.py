"""The interface every deletion store implements and the plain values it takes (the registry: `STORES`).

Stage 2 (acceptance, one transaction, kept short): a store hides its part set-based with `hide_scope`
(statements on the scope's tenant, project and subject or predicate, never a list of ids), or, if it
needs its targets to hide (it overrides `hide`), `find` and `hide` run there. Every other store's `find`
runs when the purge starts (`deletion.service.find_pending`), once for all stores of the request and
before any of them purges: the records are hidden but still there, so each store finds its copies
through them as it would have at acceptance. `find` records the store's targets (ids and keys, never
content), so purging does not depend on the order in which stores run. `purge` and `verify` run in
Celery tasks; both are idempotent, and `verify` reads the store again.

Adapters take a `Job` (plain values copied from the request and its store row), never the rows
themselves: the service and the tasks build it and write the results back, and a restore's replay
builds one for a request this database never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, NamedTuple

from django.db.models import QuerySet

from deletion.models import DeletionRequest, StoreProgress
from memory_admin.memory.models import MemoryRecord, RecordQuerySet

REDACTION = "[redacted by deletion {request}]"
NOTICE_REASON = "Deleted by request {request}."
# The targets of a store row whose `find` waits for the purge to start (content-free, like any targets).
PENDING_TARGETS: dict[str, Any] = {"pending": "found when the purge starts"}


class ScopeRecord(NamedTuple):
    """A scope's record as a plain row (a tuple, not a model instance: far less Python time for a subject's
    10,000 records), with the fields the tombstones and the stores' `find` and `hide_scope` read. A store
    reading another field of `Scope.records` adds it here. Reads like a record for the fields it has."""

    id: int
    tenant_id: int
    project_id: int
    memory_id: str
    subject_id: str
    predicate: str
    value: Any
    revision: int
    is_head: bool
    source_canonical_ref: str
    source_revision: str
    source_event_ids: list[str]
    tombstoned_at: datetime | None

    @property
    def pk(self) -> int:
        return self.id


# The record fields a scope's records are loaded with at acceptance (and for a preview).
SCOPE_FIELDS: tuple[str, ...] = ScopeRecord._fields


def scope_records(records: QuerySet[MemoryRecord]) -> list[ScopeRecord]:
    """`records` (a scope's query, ordered) as plain rows, in one SELECT of `SCOPE_FIELDS`."""
    return [ScopeRecord(*row) for row in records.values_list(*SCOPE_FIELDS)]


@dataclass
class Scope:
    """What a request covers, resolved to records (history included; `SCOPE_FIELDS` at least)."""

    tenant_id: int
    project_id: int
    project_key: str
    records: Sequence[ScopeRecord | MemoryRecord]
    subjects: list[str] = field(default_factory=list)
    # The scope as filed (DeletionRequest.ScopeKind and its value), and at acceptance the request's id
    # (for the markers `hide_scope` leaves); empty for a preview and a restore's replay.
    kind: str = ""
    value: Any = None
    request_public_id: str = ""

    @property
    def memory_ids(self) -> list[str]:
        return [r.memory_id for r in self.records]

    @property
    def record_ids(self) -> list[int]:
        return [r.pk for r in self.records]

    def records_query(self) -> RecordQuerySet:
        """The scope's records as one condition on the tenant, project and subject or predicate (the
        indexes the records list uses), never a list of ids; bounded by the ids resolved, so a record
        written after the scope was resolved is not taken with it. Memory ids are the list the request
        named. No record resolved: nothing."""
        if not self.records:
            return MemoryRecord.all_objects.none()
        ids = self.record_ids
        records = MemoryRecord.all_objects.filter(
            tenant_id=self.tenant_id, project_id=self.project_id, id__gte=min(ids), id__lte=max(ids)
        )
        if self.kind == DeletionRequest.ScopeKind.SUBJECT:
            return records.filter(subject_id=self.value)
        if self.kind == DeletionRequest.ScopeKind.PREDICATE:
            return records.filter(predicate=self.value)
        return records.filter(memory_id__in=self.memory_ids)


@dataclass
class Found:
    count: int
    targets: dict[str, Any]
    samples: list[str]


@dataclass
class Verification:
    remaining: int
    evidence: dict[str, Any]
    waiting: bool = False  # nothing left to do here but wait (holders to acknowledge)


@dataclass(frozen=True)
class Job:
    """One store's part of one request, as plain values.

    `targets` are what `find` recorded at acceptance. `evidence` is what the store row holds so far; a
    purge may add to it (the vector index's compaction report), and the caller stores it with the
    verification's evidence."""

    tenant_id: int
    request_public_id: str
    project_id: int
    project_key: str
    targets: dict[str, Any]
    accepted_at: datetime | None = None
    purge_confirmed_at: datetime | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def redaction(self) -> str:
        """The marker left where the request's content was."""
        return REDACTION.format(request=self.request_public_id)


def job_for(progress: StoreProgress) -> Job:
    """The plain value of a store row and its request (select_related("request__project") saves queries)."""
    request = progress.request
    return Job(
        tenant_id=request.tenant_id,
        request_public_id=request.public_id,
        project_id=request.project_id,
        project_key=request.project.key,
        targets=progress.targets,
        accepted_at=request.accepted_at,
        purge_confirmed_at=request.purge_confirmed_at,
        evidence=dict(progress.evidence),
    )


class Store:
    """A store a deletion must reach. Subclasses set `name` (at most 20 characters: the store row's
    column), `label` (how the deletion page names it) and `replayed` (whether a restore's replay purges it again); one line in `STORES`'s built-ins
    (deletion/stores/__init__.py) registers one, and where it is listed is where it runs and is reported.

    At acceptance a store hides its part with `hide_scope` (set-based), or with `find` then `hide` when it
    overrides `hide`; otherwise its `find` waits for the purge (see the module's docstring)."""

    name: ClassVar[str]
    label: ClassVar[str] = ""
    replayed: ClassVar[bool] = False

    def find(self, scope: Scope) -> Found:
        raise NotImplementedError

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        """Stage 2 without targets, set-based, in the acceptance transaction: how many items were hidden.
        A store that overrides this (or hides nothing) finds its targets when the purge starts."""
        return 0

    def hide(self, job: Job, now: datetime) -> int:
        """Stage 2 from the targets `find` recorded: a store that overrides this is found and hidden in the
        acceptance transaction (a store whose copies cannot be selected by the scope, such as files)."""
        return 0

    @property
    def hides_by_targets(self) -> bool:
        """Whether stage 2 needs this store's targets (it overrides `hide`): then `find` runs at acceptance."""
        return type(self).hide is not Store.hide

    def purge(self, job: Job) -> int:
        return 0

    def verify(self, job: Job) -> Verification:
        raise NotImplementedError
