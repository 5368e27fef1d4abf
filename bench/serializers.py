"""Rendering answers: an answer's declared serializer fields against the hand-built row kept beside it.

Each case renders the same in-memory objects (no database: only the Python time of turning loaded rows into
the answer's data) two ways, and prints the milliseconds per 1,000 items and their ratio:

- declared: the serializer's declared fields (`shapes.fields.declared_representation`, DRF's own loop);
- hand-built: the row function the serializer renders through (`memory.shapes.record_payload`, ...).

docs/hand-built-rows.md keeps a hand-built row only where the ratio is large on a hot path (record list,
facts/current, as-of, search). Figures only, never asserted; CPU time of this process, with the load
average printed beside them (the machine may be shared).

    make bench-serializers                       # 1,000 items, best of 7 runs each
    make bench-serializers BENCH_ARGS="--items 5000 --repeat 9"
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))


Pairs = list[tuple[str, Callable[[], object], Callable[[], object]]]  # (name, slower path, faster path)


def best_ms(render: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` runs, in milliseconds of this process's CPU time (`process_time`: time spent
    waiting for a core the machine's other work holds is not counted, so the figures move less on a shared
    machine than wall-clock ones)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        render()
        best = min(best, time.process_time() - started)
    return best * 1000


def records(n: int, linked_columns: bool) -> list[Any]:
    """`n` records as a query loads them: with the columns `payload_columns` adds (the record list, history),
    or with their relations loaded (`select_related`, as the as-of read and search give them)."""
    from memory_admin.accounts.models import Principal
    from memory_admin.memory.models import MemoryRecord, Project

    moment = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    project = Project(id=1, key="proj-01")
    issuer = Principal(id=1, username="agent-1", name="Agent One")
    rows = []
    for i in range(n):
        record = MemoryRecord(
            id=i + 1,
            project=project,
            issuer=issuer,
            memory_id=f"mem_{i:08d}",
            subject_id=f"subj-{i:05d}",
            predicate="email",
            value={"address": f"user{i}@example.com"},
            status=MemoryRecord.Status.ACCEPTED,
            status_reason="",
            valid_from=moment,
            valid_to=None,
            recorded_from=moment,
            recorded_to=None,
            last_verified_at=moment,
            recheck_after=moment + timedelta(days=30),
            retain_until=None,
            revision=3,
            source_canonical_ref=f"crm://contacts/{i}",
            source_revision="r3",
            derived_from=[],
            source_event_ids=["evt_1", "evt_2"],
        )
        if linked_columns:
            record.__dict__.update(
                payload_project_key=project.key,
                payload_issuer_name=issuer.name,
                payload_issuer_username=issuer.username,
                payload_superseded_by=None,
                payload_supersedes=[f"mem_old_{i}"],
            )
        else:  # what prefetch_related("supersedes") leaves on the record
            older = MemoryRecord.objects.none()
            older._result_cache = [MemoryRecord(id=n + i + 1, memory_id=f"mem_old_{i}")]
            setattr(record, "_prefetched_objects_cache", {"supersedes": older})  # noqa: B010
        rows.append(record)
    return rows


def fact_views(n: int) -> list[Any]:
    from memory_admin.memory.reads import FactView

    return [
        FactView(
            record=record,
            status="accepted",
            freshness="fresh",
            last_verified_at=record.last_verified_at,
            last_verified_value=record.value,
            caveat=None,
            action_allowed=True,
        )
        for record in records(n, linked_columns=False)
    ]


def search_hits(n: int) -> list[Any]:
    from memory_admin.derived.search import SearchHit

    return [
        SearchHit(record=view.record, score=0.8123456789, usable=True, current=None, view=view, rank=i + 1)
        for i, view in enumerate(fact_views(n))
    ]


def cases(n: int) -> Pairs:
    """(name, declared, hand-built) for each answer that keeps a hand-built row."""
    from memory_admin.memory.shapes import record_payload
    from memory_admin.shapes.derived import SearchHitSerializer, hit_payload
    from memory_admin.shapes.fields import declared_representation
    from memory_admin.shapes.records import FactSerializer, RecordSerializer, fact_payload

    listed = records(n, linked_columns=True)
    related = records(n, linked_columns=False)
    views = fact_views(n)
    hits = search_hits(n)
    key = ("proj-01", "subj-00001", "email")
    record_serializer = RecordSerializer()
    fact_serializer = FactSerializer(context={"key": key})
    hit_serializer = SearchHitSerializer()
    return [
        (
            "record list, history (columns)",
            lambda: [declared_representation(record_serializer, r) for r in listed],
            lambda: [record_payload(r) for r in listed],
        ),
        (
            "record, as-of (relations)",
            lambda: [declared_representation(record_serializer, r) for r in related],
            lambda: [record_payload(r) for r in related],
        ),
        (
            "facts/current",
            lambda: [declared_representation(fact_serializer, v) for v in views],
            lambda: [fact_payload(v, *key) for v in views],
        ),
        (
            "search hit",
            lambda: [declared_representation(hit_serializer, h) for h in hits],
            lambda: [hit_payload(h) for h in hits],
        ),
    ]


def lib_cases(n: int) -> Pairs:
    """(name, Django's path, lib's path) for what lib/rows.py and lib/prepared.py replace, CPU only: both sides
    do everything but the round trip (which is the same statement either way)."""
    from django.db import connection, models
    from django.db.models.sql import InsertQuery

    from memory_admin.lib import rows
    from memory_admin.memory import reads
    from memory_admin.memory.models import MemoryRecord

    loaded = records(n, linked_columns=False)
    fields = [f for f in MemoryRecord._meta.concrete_fields if not f.primary_key]
    names = [f.attname for f in MemoryRecord._meta.concrete_fields]
    tuples = [tuple(r.__dict__.get(name) for name in names) for r in loaded]
    django_from_db = models.Model.from_db.__func__  # type: ignore[attr-defined]
    kwargs = [{f.attname: r.__dict__.get(f.attname) for f in fields} for r in loaded]

    def save_sql() -> None:  # what save(force_insert=True) builds on every call
        for record in loaded:
            query = InsertQuery(MemoryRecord)
            query.insert_values(fields, [record])
            query.get_compiler(connection=connection).as_sql()

    def rows_sql() -> None:  # lib.rows.insert: the statement built once per model, each value prepared
        for record in loaded:
            columns, _head = rows._insert_columns(MemoryRecord, False)
            rows._values(record, columns, True)

    as_of = reads._AS_OF
    alias = connection.alias
    values = [
        {
            "tenant": 1,
            "project": r.project.key,
            "subject": r.subject_id,
            "predicate": r.predicate,
            "valid_at": r.valid_from,
            "known_at": r.recorded_from,
        }
        for r in loaded
    ]
    template = as_of.template(alias)

    def compiled_each_time() -> None:  # the queryset's path: build, compile
        for v in values:
            as_of.build(**v)[:1].query.get_compiler(using=alias).as_sql()

    def prepared() -> None:  # PreparedRead.get's path before execute: the values put in the compiled SQL
        for v in values:
            params = list(template.params)
            for position, name in template.slots:
                params[position] = as_of._prep(name, v[name], connection)

    return [
        (
            "model rows from query rows (from_db)",
            lambda: [django_from_db(MemoryRecord, alias, names, t) for t in tuples],
            lambda: [MemoryRecord.from_db(alias, names, t) for t in tuples],
        ),
        (
            "unsaved record (build)",
            lambda: [MemoryRecord(**k) for k in kwargs],
            lambda: [rows.build(MemoryRecord, k) for k in kwargs],
        ),
        ("record INSERT statement (insert)", save_sql, rows_sql),
        ("as-of lookup SQL (prepared)", compiled_each_time, prepared),
    ]


def print_table(title: str, left: str, right: str, figures: list[tuple[str, float, float]]) -> None:
    print(f"\n{title}")
    print(f"{'':38} {left:>10} {right:>11} {'ratio':>7}")
    for name, slow, fast in figures:
        print(f"{name:38} {slow:10.2f} {fast:11.2f} {slow / fast:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000, help="items rendered per run (default 1000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per path; the best is shown (default 7)")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    import django

    django.setup()

    per_thousand = 1000 / args.items

    def figures(pairs: Pairs) -> list[tuple[str, float, float]]:
        return [
            (name, best_ms(slow, args.repeat) * per_thousand, best_ms(fast, args.repeat) * per_thousand)
            for name, slow, fast in pairs
        ]

    print(f"{args.items} items, best of {args.repeat} runs, ms per 1,000 (load average {os.getloadavg()[0]:.2f})")
    rendering = cases(args.items)
    for name, declared, hand_built in rendering:
        if declared() != hand_built():
            sys.exit(f"{name}: the declared fields and the hand-built row render different answers")
    print_table(
        "Answers: declared serializer fields vs the hand-built row", "declared", "hand-built", figures(rendering)
    )
    print_table(
        "lib/rows.py, lib/prepared.py (CPU, no round trip): Django's path vs lib's",
        "Django",
        "lib",
        figures(lib_cases(args.items)),
    )


if __name__ == "__main__":
    main()
