"""Rendering answers: an answer's declared serializer fields against the hand-built row kept beside it.

Each case renders the same in-memory objects (no database: only the Python time of turning loaded rows into
the answer's data) two ways, and prints the milliseconds per 1,000 items and their ratio:

- declared: the serializer's declared fields (`shapes.fields.declared_representation`, DRF's own loop);
- hand-built: the row function the serializer renders through (`memory.shapes.record_payload`, ...).

docs/hand-built-rows.md keeps a hand-built row only where the ratio is large on a hot path (record list,
facts/current, as-of, search). Figures only, never asserted (the machine is shared: read the load column).

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


def best_ms(render: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` runs, in milliseconds (the least disturbed by the machine's other work)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        render()
        best = min(best, time.perf_counter() - started)
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


def cases(n: int) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000, help="items rendered per run (default 1000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per path; the best is shown (default 7)")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    import django

    django.setup()

    print(
        f"Rendering {args.items} items, best of {args.repeat} runs, ms per 1,000 items (load {os.getloadavg()[0]:.2f})"
    )
    print(f"{'answer':34} {'declared':>10} {'hand-built':>11} {'ratio':>7}")
    per_thousand = 1000 / args.items
    for name, declared, hand_built in cases(args.items):
        if declared() != hand_built():
            sys.exit(f"{name}: the declared fields and the hand-built row render different answers")
        slow = best_ms(declared, args.repeat) * per_thousand
        fast = best_ms(hand_built, args.repeat) * per_thousand
        print(f"{name:34} {slow:10.2f} {fast:11.2f} {slow / fast:6.2f}x")


if __name__ == "__main__":
    main()
