"""Propagation steps are one registry (`memory_admin.derived.propagation.STEPS`): a step registered with one line is
run by a supersession (through memory's `belief_ended` hook, as every write ends a belief) after the built-ins,
gated by its own presence check, and by `propagate_set` when it does sets; a second step of a kind already
registered is refused."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from memory_admin.derived.models import Propagation
from memory_admin.derived.propagation import (
    STEPS,
    IdMatch,
    Run,
    SetRun,
    Step,
    propagate_set,
    set_kinds,
)
from memory_admin.lib.registry import AlreadyRegistered
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, deadline

BUILT_IN = ["summaries", "actions", "contexts", "caches", "vectors"]


class Seen:
    def __init__(self) -> None:
        self.runs: list[tuple[str, list[str], str]] = []
        self.sets: list[tuple[str, list[str]]] = []


@pytest.fixture
def seen() -> Iterator[Seen]:
    """Three steps that exist only in this test: one always runs, one only when its check finds the records,
    one never (its check finds nothing). The first also does sets."""
    seen = Seen()

    def handle(kind: str):
        def run(run: Run) -> None:
            seen.runs.append((kind, [r.memory_id for r in run.records], run.reason))
            for record in run.records:
                run.note(record.pk, Propagation.Kind.CACHE, f"{kind}:{record.memory_id}", "probed")

        return run

    def handle_set(run: SetRun) -> None:
        seen.sets.append(("always", sorted(run.records.values_list("memory_id", flat=True))))

    def finds_the_records(ids: IdMatch, now: datetime) -> tuple[str, list[Any]]:
        match, params = ids
        return f"EXISTS (SELECT 1 FROM {MemoryRecord._meta.db_table} WHERE id {match})", list(params)

    def finds_nothing(ids: IdMatch, now: datetime) -> tuple[str, list[Any]]:
        return "EXISTS (SELECT 1 WHERE 1 = 0)", []

    added = [
        Step("always", handle("always"), handle_set=handle_set),
        Step("gated", handle("gated"), present=finds_the_records),
        Step("never", handle("never"), present=finds_nothing),
    ]
    for step in added:
        STEPS.register(step)
    try:
        yield seen
    finally:
        for step in added:
            STEPS.unregister(step.kind)
    assert list(STEPS) == BUILT_IN


def test_the_built_in_steps_run_in_rule_10s_order():
    assert list(STEPS) == BUILT_IN
    assert set_kinds() == ["summaries", "actions", "contexts", "caches"]  # vectors are left to a set's caller


def test_a_registered_step_is_run_by_a_supersession_after_the_built_ins(agent, seen):
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    assert seen.runs == []  # nothing ended yet
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))

    reason = seen.runs[0][2]
    assert seen.runs == [("always", [first.memory_id], reason), ("gated", [first.memory_id], reason)]
    assert reason.startswith("Superseded by")
    # What the steps noted joins the built-ins' log, in the order they ran.
    log = list(Propagation.objects.filter(record_id=first.pk).order_by("id").values_list("dependant_id", flat=True))
    assert log == [f"record:{first.memory_id}", f"always:{first.memory_id}", f"gated:{first.memory_id}"]


def test_a_registered_step_that_does_sets_is_run_by_propagate_set(agent, seen):
    record = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    records = MemoryRecord.all_objects.filter(subject_id=DEADLINE["subject_id"])
    assert set_kinds() == ["summaries", "actions", "contexts", "caches", "always"]
    with transaction.atomic():
        propagate_set(records, tenant_id=agent.tenant_id, reason="Gone.", now=timezone.now())
        propagate_set(records, tenant_id=agent.tenant_id, reason="Gone.", now=timezone.now(), kinds=["caches"])
    assert seen.sets == [("always", [record.memory_id])]  # the default is every kind; the second asked for caches
    with pytest.raises(ValueError, match="No propagation step does \\['gated'\\] for a set"):
        propagate_set(records, tenant_id=agent.tenant_id, reason="Gone.", now=timezone.now(), kinds=["gated"])


def test_a_second_step_of_a_registered_kind_is_refused():
    with pytest.raises(AlreadyRegistered, match="Two propagation steps have the key 'caches'"):
        STEPS.register(Step("caches", lambda run: None))
    assert list(STEPS) == BUILT_IN
