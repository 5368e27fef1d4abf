"""The interface every deletion store implements, the plain values it takes, and the registry.

`find` runs when the request is accepted and records the store's targets (ids and keys, never
content), so purging does not depend on the order in which stores run. `hide` is the store's part of
stage 2 and runs in the acceptance transaction (database stores only). `purge` and `verify` run in
Celery tasks; both are idempotent, and `verify` reads the store again.

Adapters take a `Job` (plain values copied from the request and its store row), never the rows
themselves: the service and the tasks build it and write the results back, and a restore's replay
builds one for a request this database never saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from deletion.models import StoreProgress
from memory_admin.memory.models import MemoryRecord

REDACTION = "[redacted by deletion {request}]"
NOTICE_REASON = "Deleted by request {request}."


@dataclass
class Scope:
    """What a request covers, resolved to records (history included)."""

    tenant_id: int
    project_id: int
    project_key: str
    records: list[MemoryRecord]
    subjects: list[str] = field(default_factory=list)

    @property
    def memory_ids(self) -> list[str]:
        return [r.memory_id for r in self.records]

    @property
    def record_ids(self) -> list[int]:
        return [r.pk for r in self.records]


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
    column), `position` (where it runs and is reported among the stores) and `replayed` (whether a
    restore's replay purges it again), and register themselves with `@register`."""

    name: ClassVar[str]
    position: ClassVar[int]
    replayed: ClassVar[bool] = False

    def find(self, scope: Scope) -> Found:
        raise NotImplementedError

    def hide(self, job: Job, now: datetime) -> int:
        return 0

    def purge(self, job: Job) -> int:
        return 0

    def verify(self, job: Job) -> Verification:
        raise NotImplementedError


# The registry knows no store: each module of this package registers its own, and the package imports
# every module it holds (deletion/stores/__init__.py).
_registry: dict[str, Store] = {}


def register[S: type[Store]](cls: S) -> S:
    """Class decorator: one instance of the store joins every deletion from now on."""
    name = cls.name
    max_length = StoreProgress._meta.get_field("store").max_length or 0
    if not name or len(name) > max_length:
        raise ValueError(f"A store's name must have 1 to {max_length} characters, not {name!r}.")
    existing = _registry.get(name)
    if existing is not None and _path(type(existing)) != _path(cls):  # the same class imported again is fine
        raise ValueError(f"Two stores are named {name!r}: {_path(type(existing))} and {_path(cls)}.")
    _registry[name] = cls()
    return cls


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def unregister(name: str) -> None:
    _registry.pop(name, None)


def registered() -> dict[str, Store]:
    """Every store by name, in the order they run and are reported (their position)."""
    ordered = sorted(_registry.values(), key=lambda s: (s.position, s.name))
    return {s.name: s for s in ordered}


def get(name: str) -> Store:
    try:
        return _registry[name]
    except KeyError:
        raise LookupError(f"No deletion store {name!r} is registered.") from None


def replayed() -> dict[str, Store]:
    """The stores a restore's replay purges again, in their order."""
    return {name: store for name, store in registered().items() if store.replayed}
