"""Stale planner statistics after a large import, and the refresh that fixes them (issue 36, item 4;
`make bench-stale-stats`).

1. creates its own database (memory_admin_bench_stats), migrates it, and once generates `--background` records
   of another tenant (bench/run.py's COPY generator), analyzed: the large table;
2. generates `--imported` records of a new tenant, not analyzed, with autovacuum held off on the table while
   timing: a tenant that has just imported into the large table, before autovacuum comes round;
3. times `--lookups` reads of one of that tenant's records by `memory_id`, as `GET /api/v1/records/<memory_id>/`
   reads it (RecordViewSet._record), with the plan PostgreSQL chose;
4. runs the product's refresh (`memory.planner_stats.refresh`, what a large batch queues and `manage.py import`
   runs at its end), timed, and times the same reads again.
Prints median and p95 milliseconds before and after; it never asserts timings.

Run: `make bench-stale-stats` or `BENCH_ARGS="--imported 500000" make bench-stale-stats`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.measure import Figure, print_table  # noqa: E402
from bench.onboarding import statistics_held  # noqa: E402
from bench.run import GENERATED_PREFIX, Layout, generate, generated_count, migrate, prepare_database  # noqa: E402
from bench.setup import setup_django  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--background", type=int, default=200_000, help="records of another tenant (200,000)")
    parser.add_argument("--imported", type=int, default=200_000, help="records the new tenant imported (200,000)")
    parser.add_argument("--lookups", type=int, default=200, help="timed reads by memory_id, each side (200)")
    parser.add_argument("--regenerate", action="store_true", help="drop and recreate the bench database")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if min(args.background, args.imported, args.lookups) < 1:
        parser.error("--background, --imported and --lookups must be positive")
    return args


def lookup(tenant_id: int, memory_id: str) -> Any:
    from memory_admin.memory.models import MemoryRecord

    return MemoryRecord.objects.for_tenant(tenant_id).with_public_relations().filter(memory_id=memory_id).first()


def plan(tenant_id: int, memory_id: str) -> str:
    from memory_admin.memory.models import MemoryRecord

    query = MemoryRecord.objects.for_tenant(tenant_id).with_public_relations().filter(memory_id=memory_id)
    return " / ".join(line.strip() for line in query.order_by("pk")[:1].explain().splitlines()[:4])


def timed(name: str, tenant_id: int, ids: list[str]) -> Figure:
    samples = []
    for memory_id in ids:
        started = time.perf_counter()
        record = lookup(tenant_id, memory_id)
        samples.append((time.perf_counter() - started) * 1000)
        assert record is not None, memory_id
    return Figure(name, samples)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_django()
    prepare_database(args.regenerate)
    migrate()

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.accounts.tenancy import tenant_context
    from memory_admin.memory import planner_stats
    from memory_admin.memory.models import MemoryRecord

    background = ensure_principal("bench", "agent", ["agent"])
    if generated_count(int(background.tenant_id or 0)) == 0:
        took = generate(
            Layout(args.background, max(1, args.background // 20)),
            int(background.tenant_id or 0),
            background.pk,
            args.seed,
        )
        print(f"Background: {args.background:,} records generated and analyzed in {took:.1f} s")
    importer = ensure_principal(f"bench-import-{int(time.time())}", "importer", ["agent"])
    tenant_id = int(importer.tenant_id or 0)
    with statistics_held(True):
        took = generate(
            Layout(args.imported, max(1, args.imported // 20)), tenant_id, importer.pk, args.seed, analyze=False
        )
        print(f"Imported tenant {tenant_id}: {args.imported:,} records generated in {took:.1f} s, not analyzed")
        with tenant_context(tenant_id):
            ids = list(
                MemoryRecord.objects.filter(tenant_id=tenant_id, memory_id__startswith=GENERATED_PREFIX).values_list(
                    "memory_id", flat=True
                )
            )
            rng = random.Random(args.seed)
            sample = [rng.choice(ids) for _ in range(args.lookups)]
            lookup(tenant_id, sample[0])  # warm the connection and the code path
            print(f"plan before: {plan(tenant_id, sample[0])}")
            before = timed("read by memory_id, statistics stale", tenant_id, sample)
            started = time.perf_counter()
            analyzed = planner_stats.refresh()
            refresh_s = time.perf_counter() - started
            print(f"refresh: analyzed {', '.join(analyzed) or 'nothing'} in {refresh_s:.2f} s")
            print(f"plan after: {plan(tenant_id, sample[0])}")
            after = timed("read by memory_id, after the refresh", tenant_id, sample)
    print_table([before, after])
    print(
        f"stale statistics: read by memory_id median {before.median:.2f} ms before the refresh, "
        f"{after.median:.2f} ms after ({before.median / after.median:.0f}x); refresh {refresh_s:.2f} s"
    )


if __name__ == "__main__":
    main()
