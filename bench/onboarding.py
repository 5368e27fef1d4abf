"""Bulk onboarding benchmark (issue 16 part 3, `make bench-onboarding`): facts per second through the batch
door's domain function `memory.batch.assert_facts`, for new facts and for supersessions, next to PostgreSQL's
`COPY` of the same rows into a scratch table (the floor: no rule, no index, no audit) measured in the same run.

1. creates its own database (memory_admin_bench_onboarding), migrates it, and once generates `--background`
   records of another tenant with bench/run.py's COPY generator (the table the batches land in; 10M in the
   issue, a scale that finishes in minutes by default);
2. new facts: `--batches` batches of `--batch-size` assertions of facts that do not exist yet;
3. supersessions: the same facts again, each with a newer value and `expected_revision` (every item supersedes
   a current fact: compare-and-swap, a cut, audit, propagation);
   each followed by its floor (bench/batch_floor.py): as many batches of other facts, each captured through
   `assert_facts` and rolled back, then its statements replayed as raw SQL in one committed transaction, timed;
4. the API once: one batch of new facts through `POST /api/v1/records/batch/` in process (parsing, rendering),
   after an untimed request of one item (the first request imports the URLconf and the views);
   and `manage.py import` of a JSONL file of as many new facts as step 2 (reading, parsing, batches);
5. one `assert_fact` per fact for the same kind of rows (what the batch saves);
6. COPY: the rows step 2 wrote, copied back in as text, timed per batch into a scratch table.
Per batch: median and p95 milliseconds; facts/s over all batches; the load average before and after each.
It never asserts timings.

Run: `make bench-onboarding` or `BENCH_ARGS="--background 10000000 --subjects 100000" make bench-onboarding`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# Run as a script, Python puts bench/ first on the path, where bench/mcp.py would shadow the `mcp` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import batch_floor  # noqa: E402
from bench.measure import Figure, print_table, statement_mode  # noqa: E402
from bench.run import (  # noqa: E402
    Layout,
    generate,
    generated_count,
    isolate,
    migrate,
    prepare_database,
    server_version,
)
from bench.setup import setup_django  # noqa: E402

TENANT = "bench-onboarding"
BACKGROUND_TENANT = "bench"  # bench/run.py's tenant name, in this run's own database
AGENT = "importer"
TARGET_NEW_PER_S = 10_000.0
TARGET_SUPERSEDE_PER_S = 2_000.0


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--background", type=int, default=200_000, help="records already in the table (200,000)")
    parser.add_argument("--subjects", type=int, default=10_000, help="subjects of the background records (10,000)")
    parser.add_argument("--batches", type=int, default=10, help="timed batches per figure (default 10)")
    parser.add_argument("--batch-size", type=int, default=1000, help="assertions per batch (default 1000, the max)")
    parser.add_argument("--singles", type=int, default=500, help="facts asserted one by one for comparison (500)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/14", help="Celery broker for after-commit tasks")
    parser.add_argument(
        "--grown",
        type=int,
        default=0,
        help="write into a new tenant that already holds this many records the planner's statistics have not seen "
        "(generated after the last ANALYZE, autovacuum held off while timing): a tenant importing into a large table",
    )
    parser.add_argument("--regenerate", action="store_true", help="drop and recreate the bench database")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print a cProfile of the supersession batches and of the API batch (slower while profiled)",
    )
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.grown < 0:
        parser.error("--grown must be 0 or more")
    if min(args.batches, args.batch_size, args.singles, args.subjects) < 1 or args.batch_size > 1000:
        parser.error("--batches, --singles, --subjects must be positive and --batch-size 1..1000")
    return args


def assertions(run: str, first: int, n: int, *, value: str, revision: str, expected: int | None) -> list[Any]:
    from datetime import UTC, datetime

    from memory_admin.memory.actions import Assertion

    valid_from = datetime(2026, 10, 20, tzinfo=UTC)
    return [
        Assertion(
            project_id="onboard",
            subject_id=f"{run}-subj-{i:07d}",
            predicate=f"p{i % 7}",
            value={"v": value, "i": i},
            valid_from=valid_from,
            source_canonical_ref=f"crm:{run}:{i}",
            source_revision=revision,
            expected_revision=expected,
        )
        for i in range(first, first + n)
    ]


CPU_MS: dict[str, float] = {}  # this process's CPU time per figure (on a shared machine, wall time waits too)


@contextmanager
def profiled(enabled: bool, title: str) -> Iterator[None]:
    """With --profile: a cProfile of the block, printed by cumulative and by own time (top 30 each)."""
    if not enabled:
        yield
        return
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(30)
        print(f"--- cProfile of {title} (--profile; timings of this figure include the profiler) ---")
        print(out.getvalue())


def through_batches(principal: Any, batches: list[list[Any]], expect: str) -> tuple[list[float], list[int]]:
    """Milliseconds per batch, and the ids of the records written."""
    from memory_admin.memory.batch import assert_facts

    samples, ids = [], []
    cpu = time.process_time()
    for items in batches:
        t0 = time.perf_counter()
        result = assert_facts(principal, items)
        samples.append((time.perf_counter() - t0) * 1000)
        wrong = [i.outcome for i in result.items if i.outcome != expect]
        if wrong:
            sys.exit(f"bench: expected every item {expect}, got {sorted(set(wrong))} ({len(wrong)} items)")
        ids += [i.result.record.pk for i in result.items if i.result is not None]
    CPU_MS["per_1000"] = (time.process_time() - cpu) * 1000 * 1000 / sum(len(items) for items in batches)
    return samples, ids


def figure(name: str, samples: list[float], facts: int, target: float | None, before: str) -> Figure:
    rate = facts / (sum(samples) / 1000)
    print(f"  {name}: {rate:,.0f} facts/s (load {before} -> {load()})", flush=True)
    return Figure(
        name,
        samples,
        target=f">= {target:,.0f} facts/s" if target else "",
        met=None if target is None else rate >= target,
        note=f"{rate:,.0f} facts/s; load {before} -> {load()}",
    )


def floor_figure(kind: str, principal: Any, batches: list[list[Any]], expect: str, batch: Figure) -> Figure:
    """The floor of `batch` (bench/batch_floor.py): each of `batches` captured through assert_facts and rolled
    back, then its statements replayed as raw SQL and committed; the figure times the replays."""
    before = load()
    samples, statements, savepoints = batch_floor.floor_batches(principal, batches, expect)
    size = len(batches[0])
    floor = figure(f"floor: {kind}, batch SQL replayed ({size}/batch)", samples, size * len(batches), None, before)
    ratio = (sum(floor.samples_ms) / len(floor.samples_ms)) / (sum(batch.samples_ms) / len(batch.samples_ms))
    floor.note += f"; {statements} statements per batch; batch/floor = {ratio:.2f}"
    if savepoints:
        floor.note += f" ({savepoints} savepoints of the capture left out)"
    return floor


def copy_floor(ids: list[int], batch_size: int) -> tuple[list[float], int]:
    """COPY the rows `ids` (as text, read back from the table) into a scratch table, `batch_size` rows per
    COPY, one transaction each; milliseconds per COPY."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection
    chunks: list[bytes] = []
    for start in range(0, len(ids), batch_size):
        part = ids[start : start + batch_size]
        buffer = bytearray()
        with raw.cursor() as cur:
            query = f"COPY (SELECT * FROM memory_memoryrecord WHERE id IN ({','.join(map(str, part))})) TO STDOUT"
            with cur.copy(query) as copy:
                for data in copy:
                    buffer += data
        chunks.append(bytes(buffer))
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_onboarding_scratch")
        cursor.execute("CREATE TABLE bench_onboarding_scratch (LIKE memory_memoryrecord)")
    samples = []
    for chunk in chunks:
        t0 = time.perf_counter()
        with raw.transaction(), raw.cursor() as cur, cur.copy("COPY bench_onboarding_scratch FROM STDIN") as copy:
            copy.write(chunk)
        samples.append((time.perf_counter() - t0) * 1000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM bench_onboarding_scratch")
        copied = int(cursor.fetchone()[0])
        cursor.execute("DROP TABLE bench_onboarding_scratch")
    return samples, copied


def api_once(principal: Any, run: str, first: int, n: int, *, profile: bool = False) -> tuple[float, int]:
    from rest_framework.test import APIClient

    from memory_admin.accounts.services import issue_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(principal)}")
    items = [
        {
            "project_id": a.project_id,
            "subject_id": a.subject_id,
            "predicate": a.predicate,
            "value": a.value,
            "valid_from": a.valid_from.isoformat(),
            "source": {"canonical_ref": a.source_canonical_ref, "revision": a.source_revision},
        }
        for a in assertions(run, first, n, value="api", revision="r1", expected=None)
    ]
    # Warm-up, untimed: a web worker's first request imports the URLconf and every view module (over a second
    # here); a batch of one other fact pays that, so the figure is the batch's own cost.
    warm = {**items[0], "subject_id": f"{run}-warm-up"}
    warmed = client.post("/api/v1/records/batch/", {"items": [warm]}, format="json", secure=True)
    if warmed.status_code != 200:
        sys.exit(f"bench: the API warm-up answered {warmed.status_code}: {str(warmed.content)[:300]}")
    with profiled(profile, "the API batch (after its warm-up)"):
        t0, cpu = time.perf_counter(), time.process_time()
        # secure: with DEBUG off (production settings) plain http is redirected to https.
        response = client.post("/api/v1/records/batch/", {"items": items}, format="json", secure=True)
        elapsed = (time.perf_counter() - t0) * 1000
        CPU_MS["per_1000"] = (time.process_time() - cpu) * 1000 * 1000 / n
    if response.status_code != 200 or response.json()["counts"] != {"created": n}:
        sys.exit(f"bench: the API batch answered {response.status_code}: {str(response.content)[:300]}")
    return elapsed, n


def import_once(principal: Any, run: str, n: int, size: int) -> tuple[float, int]:
    """`manage.py import` of a JSONL file of `n` new facts (parsing, batches of `size`, the summary); ms."""
    import io
    import json
    import tempfile

    from django.core.management import call_command

    lines = [
        json.dumps(
            {
                "project_id": a.project_id,
                "subject_id": a.subject_id,
                "predicate": a.predicate,
                "value": a.value,
                "valid_from": a.valid_from.isoformat(),
                "source": {"canonical_ref": a.source_canonical_ref, "revision": a.source_revision},
            }
        )
        for a in assertions(run, 0, n, value="import", revision="r1", expected=None)
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        out = io.StringIO()
        t0, cpu = time.perf_counter(), time.process_time()
        call_command(
            "import", handle.name, tenant=TENANT, principal=AGENT, batch_size=size, no_progress=True, stdout=out
        )
        elapsed = (time.perf_counter() - t0) * 1000
        CPU_MS["per_1000"] = (time.process_time() - cpu) * 1000 * 1000 / n
    if f"created: {n}" not in out.getvalue():
        sys.exit(f"bench: the import did not create every line: {out.getvalue()[:300]}")
    return elapsed, n


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    var_dir = isolate(args.broker)
    try:
        run_benchmark(args)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)


def run_benchmark(args: argparse.Namespace) -> None:
    setup_django()
    prepare_database(args.regenerate)
    migrate()

    from memory_admin.accounts.services import ensure_principal

    background = ensure_principal(BACKGROUND_TENANT, "agent", ["agent"])
    background_tenant = int(background.tenant_id or 0)
    present = generated_count(background_tenant)
    if present == 0:
        took = generate(Layout(args.background, args.subjects), background_tenant, background.pk, args.seed)
        print(f"Background: {args.background:,} records generated in {took:.1f} s")
    else:
        print(f"Background: {present:,} generated records present (--regenerate to start over)")
    run = f"r{int(time.time())}"  # this run's subjects: new facts every run, whatever the table holds
    principal = ensure_principal(f"{TENANT}-grown-{run}" if args.grown else TENANT, AGENT, ["agent"])
    if args.grown:
        grown = Layout(args.grown, max(1, args.grown // 100))
        took = generate(grown, int(principal.tenant_id or 0), principal.pk, args.seed, analyze=False)
        print(f"Grown tenant {principal.tenant_id}: {args.grown:,} records generated in {took:.1f} s, not analyzed")
    with statistics_held(args.grown > 0):
        timed(args, principal, run)


@contextmanager
def statistics_held(hold: bool) -> Iterator[None]:
    """Autovacuum held off on the records while timing (so the grown tenant stays unseen by the statistics),
    and given back after, whatever happens."""
    from django.db import connection

    if not hold:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE memory_memoryrecord SET (autovacuum_enabled = false)")
    try:
        yield
    finally:
        connection.close()  # the timing may have left it in the app role, which cannot alter the table
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE memory_memoryrecord RESET (autovacuum_enabled)")


def timed(args: argparse.Namespace, principal: Any, run: str) -> None:
    from django.db import connection

    from bench.rls import as_app_role
    from memory_admin.memory.actions import assert_fact
    from memory_admin.memory.models import MemoryRecord

    if as_app_role(int(principal.tenant_id or 0)):
        print(f"Connected as {os.environ['BENCH_APP_ROLE']} under row-level security")

    total = MemoryRecord.all_objects.count()
    print(f"PostgreSQL {server_version()}, {total:,} records in the table, load average {load()}")
    print(f"Statements: {statement_mode()}")
    n, size = args.batches * args.batch_size, args.batch_size
    figures = []

    # Warm-up (connections, caches, plans): one small batch, not timed.
    through_batches(principal, [assertions(run + "w", 0, 50, value="w", revision="r1", expected=None)], "created")

    before = load()
    new_batches = [
        assertions(run, k * size, size, value="first", revision="r1", expected=None) for k in range(args.batches)
    ]
    samples, ids = through_batches(principal, new_batches, "created")
    new_figure = figure(f"batch: new facts ({size}/batch)", samples, n, TARGET_NEW_PER_S, before)
    new_figure.note += f"; app CPU {CPU_MS['per_1000']:.0f} ms per 1,000 facts"
    figures.append(new_figure)
    # The floor right after the figure it bounds (the machine is shared: the closer, the fairer the ratio), on
    # facts of its own; its supersessions below supersede these.
    floor_run = run + "f"
    floor_new = floor_figure(
        "new facts",
        principal,
        [
            assertions(floor_run, k * size, size, value="first", revision="r1", expected=None)
            for k in range(args.batches)
        ],
        "created",
        new_figure,
    )
    figures.append(floor_new)

    before = load()
    sup_batches = [
        assertions(run, k * size, size, value="second", revision="r2", expected=1) for k in range(args.batches)
    ]
    with profiled(args.profile, "the supersession batches"):
        samples, _ = through_batches(principal, sup_batches, "created")
    sup_figure = figure(f"batch: supersessions ({size}/batch)", samples, n, TARGET_SUPERSEDE_PER_S, before)
    sup_figure.note += f"; app CPU {CPU_MS['per_1000']:.0f} ms per 1,000 facts"
    figures.append(sup_figure)
    floor_sup = floor_figure(
        "supersessions",
        principal,
        [assertions(floor_run, k * size, size, value="second", revision="r2", expected=1) for k in range(args.batches)],
        "created",
        sup_figure,
    )
    figures.append(floor_sup)

    before = load()
    elapsed, count = api_once(principal, run + "a", 0, size, profile=args.profile)
    api_figure = figure(f"API POST /records/batch/ once ({size})", [elapsed], count, None, before)
    api_figure.note += f"; app CPU {CPU_MS['per_1000']:.0f} ms per 1,000 facts (parse, apply, render)"
    figures.append(api_figure)

    before = load()
    elapsed, count = import_once(principal, run + "i", n, size)
    import_figure = figure(f"manage.py import, {n:,} lines ({size}/batch)", [elapsed], count, None, before)
    import_figure.note += f"; app CPU {CPU_MS['per_1000']:.0f} ms per 1,000 facts (read, parse, apply)"
    figures.append(import_figure)

    before = load()
    singles = assertions(run + "s", 0, args.singles, value="one", revision="r1", expected=None)
    samples = []
    for a in singles:
        t0 = time.perf_counter()
        assert_fact(principal, a)
        samples.append((time.perf_counter() - t0) * 1000)
    figures.append(figure("assert_fact one by one (new facts)", samples, len(singles), None, before))

    before = load()
    copy_samples, copied = copy_floor(ids, size)
    if copied != len(ids):
        sys.exit(f"bench: COPY wrote {copied} rows, expected {len(ids)}")
    copy_figure = figure(f"COPY into a scratch table ({size}/COPY)", copy_samples, copied, None, before)
    figures.append(copy_figure)
    connection.close()

    print()
    print_table(figures)
    copy_rate = copied / (sum(copy_samples) / 1000)
    for f, floor in ((new_figure, floor_new), (sup_figure, floor_sup)):
        rate = n / (sum(f.samples_ms) / 1000)
        floor_rate = n / (sum(floor.samples_ms) / 1000)
        print(
            f"{f.name}: {rate:,.0f} facts/s = {rate / copy_rate:.1%} of COPY's {copy_rate:,.0f} rows/s, "
            f"{rate / floor_rate:.2f} of its floor's {floor_rate:,.0f} facts/s (the same statements as raw SQL)"
        )
    print(f"Table: {total:,} records before the run; load average at the end {load()} (2 cores shared)")


if __name__ == "__main__":
    main()
