"""The floor of a batch (issue 16 part 3): the statements one `assert_facts` batch sends, replayed as raw SQL.

The COPY figure says what PostgreSQL takes to load rows with no rule, no index and no audit; it cannot say how
much of a batch's time is the database's own work on this schema. This floor can:

1. Capture: the batch runs through `assert_facts` inside a transaction that is then rolled back, each
   statement recorded with its parameters as Django sent them (`connection.execute_wrapper`). Nothing of it
   stays: no row, no after-commit task. The savepoints of that outer transaction are left out (run alone, the
   batch is the outermost transaction and sends none of them).
2. Replay: the same statements, same parameters, through the psycopg connection itself (no ORM, no decision
   logic, no Python per item), in one transaction that commits, timed. The rows the replay writes are those the
   batch would have written: the ids it took from the sequences were never used, since the capture rolled back.

floor facts/s over batch facts/s is the share of a batch's time left to Python. The replay is what this schema
costs the database and the driver: no change to the app's code can make a batch faster than its floor.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Statements of the capture's own outer transaction, not of the batch (see the module's docstring).
_SAVEPOINT_PREFIXES = ("SAVEPOINT ", "RELEASE SAVEPOINT ", "ROLLBACK TO SAVEPOINT ")


@dataclass(frozen=True)
class CapturedBatch:
    statements: list[tuple[str, Any, bool]]  # (sql, params, executemany)
    outcomes: dict[str, int]
    savepoints: int  # left out of `statements`


class _Discard(Exception):
    """Raised inside the capture's transaction to roll it back."""


def capture_batch(principal: Any, items: Sequence[Any]) -> CapturedBatch:
    """Run `items` through `assert_facts` in a transaction that rolls back; its statements, in order."""
    from django.db import connection, transaction

    from memory_admin.memory.batch import assert_facts

    statements: list[tuple[str, Any, bool]] = []
    savepoints = 0
    outcomes: dict[str, int] = {}

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        nonlocal savepoints
        if many:
            params = list(params)  # it may be an iterator, read once by the execution below
        if sql.startswith(_SAVEPOINT_PREFIXES):
            savepoints += 1
        else:
            statements.append((sql, params, many))
        return execute(sql, params, many, context)

    try:
        with transaction.atomic(), connection.execute_wrapper(record):
            outcomes = assert_facts(principal, list(items)).counts()
            raise _Discard
    except _Discard:
        pass
    if any(sql.startswith('INSERT INTO "memory_project"') for sql, _, _ in statements):
        # Its replay would take a new id, which the captured rows do not name.
        raise RuntimeError("The floor's batch created a project: write one fact of each project before capturing.")
    return CapturedBatch(statements, outcomes, savepoints)


def replay_batch(captured: CapturedBatch) -> float:
    """The captured statements in one transaction, through psycopg, committed; milliseconds."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection  # psycopg, with the cursor class (client- or server-side binding) Django chose
    t0 = time.perf_counter()
    with raw.transaction(), raw.cursor() as cursor:
        for sql, params, many in captured.statements:
            if many:
                cursor.executemany(sql, params)
                continue
            cursor.execute(sql, params)
            if cursor.description is not None:
                cursor.fetchall()
    return (time.perf_counter() - t0) * 1000


def floor_batches(principal: Any, batches: Sequence[Sequence[Any]], expect: str) -> tuple[list[float], int, int]:
    """Capture and replay each batch; milliseconds per replay, statements per batch (the last one's) and the
    savepoints left out. Exits if a captured batch did not give every item `expect`."""
    samples: list[float] = []
    statements = savepoints = 0
    for items in batches:
        captured = capture_batch(principal, items)
        if captured.outcomes != {expect: len(items)}:
            sys.exit(f"bench: the floor's captured batch gave {captured.outcomes}, expected {expect} for every item")
        samples.append(replay_batch(captured))
        statements, savepoints = len(captured.statements), captured.savepoints
    return samples, statements, savepoints
