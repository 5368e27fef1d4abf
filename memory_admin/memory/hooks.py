"""The memory layer's extension points: the layers above register here, memory calls them.

Memory knows nobody above it. Derived stores and deletion hook into its writes from their own
`AppConfig.ready()`, as Django's `autodiscover_modules` and healthchecks' transport registry do: this
registry names no app and imports nothing above `memory`.

Two kinds of extension point:
- notifications (`belief_ended`, `records_changed`, `valid_time_settled`): memory says what happened;
- guards (`write_scope`, `check_assertion`, `guard_assertion`, `guard_derived_from`, `hidden_memory_ids`):
  the layers above may refuse a write (by raising a DomainError) or hide an item from a read.

Hooks run in registration order (INSTALLED_APPS order, since each app registers in its `ready()`), inside
the caller's transaction unless a hook's own docstring says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from memory_admin.memory.errors import DomainError
from memory_admin.memory.models import MemoryRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FactWrite:
    """What an assertion is about to write, as the guards see it (plain values, no ORM row)."""

    tenant_id: int
    project_id: str
    subject_id: str
    predicate: str
    value: Any
    source_canonical_ref: str
    source_revision: str
    event_ids: Sequence[str] = ()
    # As asserted: [{memory_id, revision}]
    derived_from: Sequence[dict[str, Any]] = ()
    # From when the fact claims to hold (content claiming to predate a subject's deletion is refused).
    valid_from: datetime | None = None


class BeliefEnded(Protocol):
    def __call__(self, records: Sequence[MemoryRecord], /, *, reason: str, now: datetime) -> object:
        """`records` stopped being the current belief (superseded, expired, excluded, disputed, or a dispute
        resolved against them). Called inside the transaction that ended them."""


class RecordsChanged(Protocol):
    def __call__(self, records: Sequence[MemoryRecord], /) -> object:
        """The stored state of `records` changed (created, or their status or validity moved). Called inside
        the writing transaction; work outside the database belongs after commit."""


class ValidTimeSettled(Protocol):
    def __call__(self, now: datetime, /) -> object:
        """The valid-time transitions due by `now` are settled (outside any transaction). A failing hook is
        logged and never fails the sweep."""


class WriteScope(Protocol):
    def __call__(self, path: str, actor: str, /) -> AbstractContextManager[None]:
        """A context manager around a write's whole transaction (`path` names the write, `actor` the
        principal): it sees the exception a guard raised after the transaction has rolled back."""


class AssertionCheck(Protocol):
    def __call__(self, write: FactWrite, /) -> None:
        """Refuse an assertion (raise a DomainError) before its transaction starts, e.g. unknown references."""


class AssertionGuard(Protocol):
    def __call__(self, write: FactWrite, /) -> None:
        """Refuse an assertion (raise a DomainError) inside its transaction, with the fact locked and
        before anything of it is written."""


class AssertionBatchGuard(Protocol):
    def __call__(self, writes: Sequence[FactWrite], /) -> dict[int, DomainError]:
        """The set form of an assertion guard, for many writes at once (memory.batch): the DomainError refusing
        each refused write, by its index. Inside the batch's transaction, with the facts locked."""


class DerivedFromGuard(Protocol):
    def __call__(self, tenant_id: int, memory_ids: Iterable[str], what: str, /) -> None:
        """Refuse a write built on the records `memory_ids` (raise a DomainError); `what` names the item."""


class HiddenMemoryIds(Protocol):
    def __call__(self, tenant_id: int, memory_ids: Iterable[str], /) -> set[str]:
        """Which of `memory_ids` must not be served any more, even from a copy (a cache)."""


_belief_ended: list[BeliefEnded] = []
_records_changed: list[RecordsChanged] = []
_valid_time_settled: list[ValidTimeSettled] = []
_write_scopes: list[WriteScope] = []
_assertion_checks: list[AssertionCheck] = []
_assertion_guards: list[AssertionGuard] = []
# (batch form, the per-write guard it stands in for)
_assertion_batch_guards: list[tuple[AssertionBatchGuard, AssertionGuard]] = []
_derived_from_guards: list[DerivedFromGuard] = []
_hidden_memory_ids: list[HiddenMemoryIds] = []


def _add[H: Callable[..., Any]](registry: list[H], hook: H) -> H:
    # ready() may run more than once in one process (test runners); a hook is registered once.
    if hook not in registry:
        registry.append(hook)
    return hook


def on_belief_ended(hook: BeliefEnded) -> BeliefEnded:
    return _add(_belief_ended, hook)


def on_records_changed(hook: RecordsChanged) -> RecordsChanged:
    return _add(_records_changed, hook)


def on_valid_time_settled(hook: ValidTimeSettled) -> ValidTimeSettled:
    return _add(_valid_time_settled, hook)


def add_write_scope(hook: WriteScope) -> WriteScope:
    return _add(_write_scopes, hook)


def add_assertion_check(hook: AssertionCheck) -> AssertionCheck:
    return _add(_assertion_checks, hook)


def add_assertion_guard(hook: AssertionGuard) -> AssertionGuard:
    return _add(_assertion_guards, hook)


def add_assertion_batch_guard(hook: AssertionBatchGuard, *, replaces: AssertionGuard) -> AssertionBatchGuard:
    """Register the set form of the assertion guard `replaces`: `guard_assertions` calls it once for many writes
    instead of calling `replaces` once per write (which `guard_assertion` still does for one)."""
    if not any(batch is hook for batch, _ in _assertion_batch_guards):
        _assertion_batch_guards.append((hook, replaces))
    return hook


def add_derived_from_guard(hook: DerivedFromGuard) -> DerivedFromGuard:
    return _add(_derived_from_guards, hook)


def add_hidden_memory_ids(hook: HiddenMemoryIds) -> HiddenMemoryIds:
    return _add(_hidden_memory_ids, hook)


def unregister(hook: Callable[..., Any]) -> None:
    """Remove `hook` from every registry (tests register their own)."""
    registries: list[list[Any]] = [
        _belief_ended,
        _records_changed,
        _valid_time_settled,
        _write_scopes,
        _assertion_checks,
        _assertion_guards,
        _derived_from_guards,
        _hidden_memory_ids,
    ]
    for registry in registries:
        while hook in registry:
            registry.remove(hook)
    _assertion_batch_guards[:] = [pair for pair in _assertion_batch_guards if hook not in pair]


# --- Called by memory -----------------------------------------------------------------------------


def belief_ended(records: Sequence[MemoryRecord], *, reason: str, now: datetime) -> None:
    """Tell the layers above that `records` stopped being the current belief (never called with none)."""
    if not records:
        return
    for hook in _belief_ended:
        hook(records, reason=reason, now=now)


def records_changed(records: Sequence[MemoryRecord]) -> None:
    for hook in _records_changed:
        hook(records)


def valid_time_settled(now: datetime) -> None:
    for hook in _valid_time_settled:
        try:
            hook(now)
        except Exception:
            logger.exception("Re-marking records that came into effect failed (%r); the next run retries.", hook)


@contextmanager
def write_scope(path: str, actor: str) -> Iterator[None]:
    """Every registered write scope around the write's transaction, the first registered outermost."""
    with ExitStack() as stack:
        for hook in _write_scopes:
            stack.enter_context(hook(path, actor))
        yield


def check_assertion(write: FactWrite) -> None:
    for hook in _assertion_checks:
        hook(write)


def guard_assertion(write: FactWrite) -> None:
    for hook in _assertion_guards:
        hook(write)


def guard_assertions(writes: Sequence[FactWrite]) -> dict[int, DomainError]:
    """`guard_assertion` for many writes: the refusal of each refused write, by index. Guards run in
    registration order, each in its set form when it has one; a write keeps the first guard's refusal."""
    refusals: dict[int, DomainError] = {}
    batch_forms = {id(single): batch for batch, single in _assertion_batch_guards}
    for guard in _assertion_guards:
        batch = batch_forms.get(id(guard))
        if batch is not None:
            for i, refusal in batch(writes).items():
                refusals.setdefault(i, refusal)
            continue
        for i, write in enumerate(writes):
            if i in refusals:
                continue
            try:
                guard(write)
            except DomainError as exc:
                refusals[i] = exc
    return refusals


def guard_derived_from(tenant_id: int, memory_ids: Iterable[str], what: str) -> None:
    ids = list(memory_ids)
    for hook in _derived_from_guards:
        hook(tenant_id, ids, what)


def hidden_memory_ids(tenant_id: int, memory_ids: Iterable[str]) -> set[str]:
    ids = list(memory_ids)
    hidden: set[str] = set()
    for hook in _hidden_memory_ids:
        hidden |= hook(tenant_id, ids)
    return hidden
