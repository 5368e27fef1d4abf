"""Every change to memory records goes through these functions, one module per topic:

- `facts`: `assert_fact` and its decision order (PRODUCT.md rule 3), step by step; `decide` is steps 3-6;
- `fact_writes`: how each decision is written (`build_record`, one apply function per step);
- `assertion`: the vocabulary of one assertion (`Assertion`, `Outcome`, `AssertResult`, `Step`, `Decision`);
- `curation`: `exclude_record`, `expire_record` and the checks they share (`get_record`, `may_expire`);
- `disputes`: `resolve_dispute`, `get_dispute`, `reopen_dispute` (undo a resolution for a while), `undo_until`;
- `transitions`: `settle_valid_time_transitions`.

The API, the dashboard, management commands and Celery tasks call them; none of PRODUCT.md's rules is
implemented anywhere else. Each runs in one transaction and writes its audit events in it. Doors import the
names below from this package; a module's private helpers are imported from the module itself.
"""

from __future__ import annotations

from memory_admin.memory.actions.assertion import (
    Assertion,
    AssertResult,
    Decision,
    DeferredWrites,
    Outcome,
    Step,
)
from memory_admin.memory.actions.curation import exclude_record, expire_record, get_record, may_expire
from memory_admin.memory.actions.disputes import (
    get_dispute,
    reopen_dispute,
    resolve_dispute,
    undo_until,
)
from memory_admin.memory.actions.fact_writes import build_record
from memory_admin.memory.actions.facts import (
    assert_fact,
    decide,
    derived_from_problems,
    fact_lock_key,
    fact_write,
    lock_fact,
    project_for,
    validate_assertion,
)
from memory_admin.memory.actions.transitions import settle_valid_time_transitions

__all__ = [
    "AssertResult",
    "Assertion",
    "Decision",
    "DeferredWrites",
    "Outcome",
    "Step",
    "assert_fact",
    "build_record",
    "decide",
    "derived_from_problems",
    "exclude_record",
    "expire_record",
    "fact_lock_key",
    "fact_write",
    "get_dispute",
    "get_record",
    "lock_fact",
    "may_expire",
    "project_for",
    "reopen_dispute",
    "resolve_dispute",
    "settle_valid_time_transitions",
    "undo_until",
    "validate_assertion",
]
