"""Memory's extension points (memory_admin.memory.hooks): the layers above register, memory calls them.

Memory imports nothing above it (the import-linter contract in pyproject.toml, run by `make lint`, and the
AST check below); derived and deletion reach its writes only through these hooks, registered in their
AppConfig.ready().
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from django.db import transaction

from deletion import tombstones
from memory_admin.derived import hooks as derived_hooks
from memory_admin.derived import lineage, propagation, tasks
from memory_admin.memory import hooks
from memory_admin.memory.actions import assert_fact, exclude_record
from memory_admin.memory.errors import InvalidInput, Tombstoned
from memory_admin.memory.models import MemoryRecord
from tests.support import ROOT, at, deadline


@pytest.fixture
def registered() -> Iterator[list[Any]]:
    """Hooks a test registers, removed again after it."""
    added: list[Any] = []
    yield added
    for hook in added:
        hooks.unregister(hook)


def test_the_apps_register_their_hooks_in_ready():
    # derived: propagation and vector refresh on memory's notifications, the event-id check on assertions
    assert propagation.propagate in hooks._belief_ended
    assert propagation.refresh_vectors_after_commit in hooks._records_changed
    assert tasks.mark_records_in_effect in hooks._valid_time_settled
    assert lineage.check_assertion_events in hooks._assertion_checks
    # deletion: the tombstone refusals as write guards, the refusal log around each guarded write
    assert tombstones.guard_assertion in hooks._assertion_guards
    assert tombstones.refuse_derived_from in hooks._derived_from_guards
    assert tombstones.tombstoned_memory_ids in hooks._hidden_memory_ids
    assert tombstones.refusals_logged in hooks._write_scopes
    assert tombstones.refuse_event in derived_hooks._event_guards


def test_a_belief_ended_hook_is_called_inside_the_transaction_that_ended_the_belief(owner, moved_deadline, registered):
    calls: list[tuple[list[str], str, datetime, int]] = []

    def hook(records: Sequence[MemoryRecord], *, reason: str, now: datetime) -> None:
        # Inside exclude_record's transaction: the exclusion is visible here and not yet committed.
        calls.append(([r.memory_id for r in records], reason, now, _depth()))
        assert MemoryRecord.objects.get(pk=records[0].pk).status == MemoryRecord.Status.EXCLUDED

    registered.append(hooks.on_belief_ended(hook))
    hooks.on_belief_ended(hook)  # registering twice (ready() run again) still calls it once
    _, current = moved_deadline
    exclude_record(owner, current.record.memory_id, "wrong source", now=at(10, 23))
    assert calls == [([current.record.memory_id], "Excluded: wrong source", at(10, 23), _depth() + 1)]


def _depth() -> int:
    """How many atomic blocks are open (pytest-django's own test transaction counts as one)."""
    return len(transaction.get_connection().savepoint_ids) + int(transaction.get_connection().in_atomic_block)


def test_a_write_guard_refuses_before_anything_is_written_and_the_write_scope_sees_it(agent, registered):
    seen: list[tuple[str, str, str]] = []

    def guard(write: hooks.FactWrite) -> None:
        assert MemoryRecord.all_objects.filter(subject_id=write.subject_id).count() == 0  # nothing written yet
        if write.value == "refused":
            raise Tombstoned("Refused by a test guard.")

    @contextmanager
    def scope(path: str, actor: str) -> Iterator[None]:
        try:
            yield
        except Tombstoned as exc:
            seen.append((path, actor, exc.detail))
            raise

    registered += [hooks.add_assertion_guard(guard), hooks.add_write_scope(scope)]
    with pytest.raises(Tombstoned):
        assert_fact(agent, deadline("refused", "r1", at(10, 20)))
    assert MemoryRecord.all_objects.count() == 0
    assert seen == [("assert_fact", agent.name, "Refused by a test guard.")]
    assert assert_fact(agent, deadline("allowed", "r1", at(10, 20))).record.value == "allowed"


def test_an_assertion_check_runs_before_the_transaction(agent, registered):
    depths: list[int] = []

    def check(write: hooks.FactWrite) -> None:
        depths.append(_depth())
        raise InvalidInput({"source": [f"checked {write.project_id}/{write.subject_id}"]})

    registered.append(hooks.add_assertion_check(check))
    with pytest.raises(InvalidInput) as refused:
        assert_fact(agent, deadline("x", "r1", at(10, 20)))
    assert refused.value.extra["errors"] == {"source": ["checked project-a/task-proposal-017"]}
    assert depths == [_depth()]  # no transaction of assert_fact's own was open yet
    assert MemoryRecord.all_objects.count() == 0


def test_memory_modules_import_nothing_above_memory():
    """The domain modules of memory (not its doors: api/, management/, tasks.py) import neither derived,
    deletion nor the dashboard, not even inside a function."""
    root = ROOT / "memory_admin" / "memory"
    upper = ("memory_admin.derived", "memory_admin.dashboard", "memory_admin.demo", "deletion")
    offenders = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if relative.parts[0] in ("api", "management", "migrations") or relative.name == "tasks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{relative}: {name}" for name in names if name.startswith(upper)]
    assert offenders == []
