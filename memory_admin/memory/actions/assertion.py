"""One assertion of a fact: what it says (`Assertion`), what it came to (`Outcome`, `AssertResult`), where the
decision order lands it (`Step`, `Decision`) and the locked state of its fact it is decided on (`_Write`).

`facts` decides (`assert_fact`, `decide`); `fact_writes` applies each decision; `memory.batch` does both for many
assertions at once, its writes collected through `DeferredWrites`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, Project


class Outcome(enum.StrEnum):
    """What an assertion did; the API maps each to its status code."""

    CREATED = "created"  # the new current belief (201)
    HISTORY = "history"  # stored as history, never current (200)
    UNCHANGED = "unchanged"  # idempotent repeat, nothing stored (200)
    DISPUTED = "disputed"  # both kept, a dispute opened (202)


@dataclass(frozen=True)
class AssertResult:
    outcome: Outcome
    record: MemoryRecord
    dispute: Dispute | None = None


@dataclass(frozen=True)
class Assertion:
    project_id: str
    subject_id: str
    predicate: str
    value: Any
    valid_from: datetime
    source_canonical_ref: str
    source_revision: str
    valid_to: datetime | None = None
    expected_revision: int | None = None
    derived_from: list[dict[str, Any]] | None = None
    event_ids: list[str] | None = None


class Step(enum.StrEnum):
    """Where the decision order lands an assertion that passed validation and the issuer check."""

    FIRST = "first"  # the fact has no current record: the value becomes its belief (CREATED)
    HISTORY = "history"  # step 3: stored as history (HISTORY)
    UNCOVERED = "uncovered"  # step 3, but nothing believed covers its start: it answers there (see _apply_uncovered)
    UNCHANGED = "unchanged"  # step 4, or a repeat of a disputed candidate (UNCHANGED)
    DISPUTE = "dispute"  # step 5: both kept, a dispute opened (DISPUTED)
    SUPERSEDE = "supersede"  # step 6: compare-and-swap succeeded, the value becomes the belief (CREATED)


@dataclass(frozen=True)
class Decision:
    step: Step
    reason: str = ""  # HISTORY: why it is not current
    record: MemoryRecord | None = None  # UNCHANGED: the record it repeats; UNCOVERED: the one taking over (if any)
    dispute: Dispute | None = None  # UNCHANGED: the open dispute whose candidate it repeats


class DeferredWrites(Protocol):
    """Where the apply functions put their writes when a batch applies many assertions (memory.batch): the
    rows, updates, audit events and ended beliefs are collected and written in a few statements per batch.
    Without one (assert_fact) each write is made at once. Either way the same apply functions decide them."""

    def insert(self, record: MemoryRecord) -> None: ...
    def update(self, record: MemoryRecord, fields: list[str]) -> None: ...
    def audit(self, events: list[audit.Event]) -> None: ...
    def belief_ended(self, records: list[MemoryRecord]) -> None: ...


@dataclass(frozen=True)
class _Write:
    """One assertion being applied, with the locked state of its fact (replaces a bag of keyword arguments)."""

    principal: Principal
    assertion: Assertion
    project: Project
    policy: FieldPolicy | None
    now: datetime
    verified_at: datetime | None
    memory_id: str
    # The fact's head and every accepted row, locked (accepted rows may need cutting).
    locked: list[MemoryRecord]
    head: MemoryRecord | None
    next_revision: int
    # Set by memory.batch: the writes are collected and made in bulk (see DeferredWrites).
    deferred: DeferredWrites | None = None
    # The id the version this write inserts takes, drawn with the lock (PostgreSQL, one assertion); else None.
    new_pk: int | None = None
