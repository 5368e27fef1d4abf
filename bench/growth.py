"""The growth curve (`make bench-growth`): the same read and write figures at several sizes of the records table,
one table with the sizes as columns (issue 36, item 3; docs/scaling.md).

Each size has its own database, memory_admin_bench_<1m|10m|30m> (the size's label), generated once with the bench's
own COPY generator (bench/run.py `generate`) and kept: the data's shape is the same at every size (100 records per
subject over 100 predicates, revisions of each fact key spread over five years), only its amount grows. Then one process per size, all alive
at once, each on its own database, measures the API list page, as-of, facts/current for action, search, a CAS write
and a batch write, in `--rounds` rounds with the sizes in turn in each, so that a shared machine's load falls on every
size alike. Printed, never asserted.

Run: `make bench-growth` or
`DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/growth.py --sizes 1000000,10000000`
(only the server of DATABASE_URL is used; each size's database name replaces its path).
`--generate-only` generates what is missing and stops; `--measure-only` never generates and fails when a size's
database is missing; `--min-free-gb` refuses a generation that would leave less free disk than that.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python bench/x.py` puts bench/ first on sys.path, where bench/mcp.py would shadow the `mcp` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.measure import percentile  # noqa: E402

DEFAULT_SIZES = (1_000_000, 10_000_000, 30_000_000)
RECORDS_PER_SUBJECT = 100  # bench/run.py's default shape (1M records over 10,000 subjects), kept at every size
# On-disk bytes per generated record (table, indexes, the WAL it leaves behind), measured: 30M took ~27 GiB
# when its indexes grew row by row, ~24 GiB since they are built after the COPY (kept high: WAL, headroom).
BYTES_PER_RECORD = 1000
RESULT_PREFIX = "GROWTH-RESULT "


def label(size: int) -> str:
    """1000000 -> 1m, 30000000 -> 30m, 2000 -> 2k, 2500 -> 2500."""
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}m"
    if size % 1000 == 0:
        return f"{size // 1000}k"
    return str(size)


DATABASE_PREFIX = "memory_admin_bench_"


def database_name(size: int, prefix: str = DATABASE_PREFIX) -> str:
    return f"{prefix}{label(size)}"


def database_url(base: str, name: str) -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/" + name))


def subjects_for(size: int) -> int:
    return max(1, size // RECORDS_PER_SUBJECT)


# --- One size, in its own process (DATABASE_URL names its database) -----------------------------


def database_exists(name: str) -> bool:
    from bench.run import admin_connection

    with admin_connection() as admin:
        return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def database_size() -> tuple[int, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_database_size(current_database()), pg_size_pretty(pg_database_size(current_database()))"
        )
        size, pretty = cursor.fetchone()
    return int(size), str(pretty)


def free_bytes() -> tuple[int, str]:
    """Free bytes on the PostgreSQL data directory's file system (the server's `data_directory` when this
    process can see it, else the repository's)."""
    from psycopg import Error

    from bench.run import admin_connection

    path = str(REPO_ROOT)
    try:
        with admin_connection() as admin:
            row = admin.execute("SHOW data_directory").fetchone()
        if row and os.path.isdir(str(row[0])):
            path = str(row[0])
    except Error:  # not a superuser (nor pg_read_all_settings): measure where we are
        pass
    return shutil.disk_usage(path).free, path


def pending_migrations() -> list[str]:
    """The migrations the code has and this database has not applied."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


def check_disk(name: str, size: int, min_free_gb: float) -> None:
    """Exit, saying why, when generating `size` records would leave less than `min_free_gb` GiB free."""
    free, where = free_bytes()
    need = size * BYTES_PER_RECORD
    left = (free - need) / 2**30
    if left < min_free_gb:
        sys.exit(
            f"bench-growth: refusing to generate {size:,} records into {name}: about {need / 2**30:.1f} GiB needed, "
            f"{free / 2**30:.1f} GiB free on {where}, which would leave {left:.1f} GiB, under --min-free-gb "
            f"{min_free_gb:g}"
        )
    print(f"Disk: {free / 2**30:.1f} GiB free on {where}, about {need / 2**30:.1f} GiB needed for {size:,} records")


def worker_generate(size: int, min_free_gb: float, seed: int) -> None:
    """Create, migrate and fill this size's database unless it already holds exactly this size."""
    from bench.run import (
        Layout,
        check_generated,
        generate,
        generated_count,
        matches_layout,
        migrate,
        prepare_database,
    )
    from bench.setup import AGENT, TENANT, setup_django

    setup_django()
    from django.conf import settings

    name = settings.DATABASES["default"]["NAME"]
    layout = Layout(size, subjects_for(size))
    existed = database_exists(name)
    if not existed:
        check_disk(name, size, min_free_gb)
    elif pending := pending_migrations():
        # A data migration walks every record in Python (0021 sealed each source ref): at 30M that takes longer
        # than generating the records again on the current schema.
        print(f"{name}: migrations not applied ({', '.join(pending)}): generated again on the current schema")
        check_disk(name, size, min_free_gb)
        from django.db import connections

        connections.close_all()
        prepare_database(regenerate=True)
        existed = False
    prepare_database(regenerate=False)
    migrate()
    from memory_admin.accounts.services import ensure_principal

    principal = ensure_principal(TENANT, AGENT, ["agent"])
    tenant_id = int(principal.tenant_id or 0)
    present = generated_count(tenant_id)
    if present and matches_layout(tenant_id, layout):
        _, pretty = database_size()
        print(f"{name}: {present:,} records present, kept ({pretty} on disk)")
        report({"generated": remembered_generation(name), "size_on_disk": pretty})
        return
    if existed:
        check_disk(name, size, min_free_gb)
    if present:
        print(f"{name}: {present:,} generated records, not {size:,}: starting over")
        prepare_database(regenerate=True)
        migrate()
        principal = ensure_principal(TENANT, AGENT, ["agent"])
        tenant_id = int(principal.tenant_id or 0)
    seconds = generate(layout, tenant_id, principal.pk, seed)
    check_generated(tenant_id)
    remember_generation(name, seconds)
    _, pretty = database_size()
    print(f"{name}: {size:,} records generated in {seconds:.1f} s; {pretty} on disk")
    report({"generated": seconds, "size_on_disk": pretty})


def report(result: dict[str, Any]) -> None:
    """The worker's answer to the parent: one line of JSON on stdout, after the worker's own output."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def generation_note(seconds: float) -> str:
    return f"bench-growth: generated in {seconds:.1f} s"


def remember_generation(name: str, seconds: float) -> None:
    """Keep the generation's time with the database (its comment), so that a later --measure-only prints it."""
    from psycopg import sql

    from bench.run import admin_connection

    with admin_connection() as admin:
        admin.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(generation_note(seconds)))
        )


def remembered_generation(name: str) -> float | None:
    from bench.run import admin_connection

    with admin_connection() as admin:
        row = admin.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
    comment = (row[0] if row else None) or ""
    prefix, suffix = generation_note(0).split("0.0")
    if comment.startswith(prefix) and comment.endswith(suffix):
        try:
            return float(comment[len(prefix) : len(comment) - len(suffix)])
        except ValueError:
            return None
    return None


def sample_keys(tenant_id: int, subjects: int, n: int, seed: int) -> list[Any]:
    """n distinct random fact keys with their current head, found through the subject index (ORDER BY random()
    over every head would read the whole table at 30M): the heads of random subjects, then n of those."""
    from django.db import connection

    from bench.measure import Head
    from bench.run import subject_key

    rng = random.Random(seed)
    picked = rng.sample(range(subjects), min(subjects, n))
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.key, r.subject_id, r.predicate, r.revision, r.source_canonical_ref, r.source_revision
            FROM memory_memoryrecord r JOIN memory_project p ON p.id = r.project_id
            WHERE r.tenant_id = %s AND r.is_head AND r.subject_id = ANY(%s)
            ORDER BY r.subject_id, r.predicate
            """,
            [tenant_id, [subject_key(i) for i in picked]],
        )
        heads = [Head(*row) for row in cursor.fetchall()]
    if len(heads) < n:
        sys.exit(f"bench-growth: {n} fact keys wanted, the sampled subjects hold {len(heads)}")
    if len(picked) == n:  # one key per subject: its first predicate after a shuffle
        by_subject: dict[str, list[Any]] = {}
        for head in heads:
            by_subject.setdefault(head.subject_id, []).append(head)
        return [rng.choice(keys) for keys in by_subject.values()][:n]
    return rng.sample(heads, n)


def fresh_for_action(ids: list[int]) -> list[tuple[int, Any, Any]]:
    """Mark the heads verified now (recheck in 30 days) so that reading them for action needs no synchronous
    recheck (the sources are not reachable); returns what to restore."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, last_verified_at, recheck_after FROM memory_memoryrecord WHERE id = ANY(%s)", [ids])
        before = [tuple(row) for row in cursor.fetchall()]
        cursor.execute(
            "UPDATE memory_memoryrecord SET last_verified_at = %s, recheck_after = %s WHERE id = ANY(%s)",
            [now, now + timedelta(days=30), ids],
        )
    return before


def restore_freshness(before: list[tuple[int, Any, Any]]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for pk, verified, recheck in before:
            cursor.execute(
                "UPDATE memory_memoryrecord SET last_verified_at = %s, recheck_after = %s WHERE id = %s",
                [verified, recheck, pk],
            )


def worker_measure(size: int, args: argparse.Namespace) -> None:
    """The figures at this size, in this process (its own Django, on the size's database), one round at a time
    as the parent asks on stdin ("round", then "end"), so that every size is measured under the same load."""
    from bench.run import BENCH_CACHE, drop_cache_keys, isolate

    os.environ.setdefault("EMBEDDER", "hashing")  # search's query embedding without a model (see docs/scaling.md)
    var_dir = isolate("redis://127.0.0.1:6379/14", os.environ.get("BENCH_CACHE_URL", BENCH_CACHE))
    try:
        bench = SizeBench(size, args)
        try:
            print(READY, flush=True)
            for line in sys.stdin:
                if line.strip() == "round":
                    report(bench.round())
                elif line.strip() == "end":
                    report(bench.finish())
                    break
        finally:
            bench.restore()
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
        drop_cache_keys()


READY = "GROWTH-READY"
BATCH_SIZE = 500  # items per assert_facts batch (POST /records/batch/ takes up to 1,000)


class SizeBench:
    """One size's database, its sampled fact keys and its timed calls; `round()` times `per_round` calls of each
    figure (and a batch of new facts), the first round after untimed warm-up calls."""

    def __init__(self, size: int, args: argparse.Namespace) -> None:
        from bench.setup import setup_django

        setup_django()
        from django.conf import settings
        from django.db import connection

        self.name = settings.DATABASES["default"]["NAME"]
        if not database_exists(self.name):
            sys.exit(
                f"bench-growth: database {self.name} for {size:,} records is missing; run without --measure-only "
                "(or with --generate-only) to generate it"
            )
        pending = pending_migrations()
        if pending:
            sys.exit(
                f"bench-growth: {self.name} is behind the code (migrations not applied: {', '.join(pending)}); run "
                "without --measure-only, which generates it again on the current schema"
            )
        from bench.run import generated_count
        from bench.setup import bench_principal

        try:
            self.principal = bench_principal()
        except Exception as exc:  # no bench tenant: an empty or foreign database
            sys.exit(f"bench-growth: {self.name} holds no bench data ({type(exc).__name__}); generate it first")
        self.tenant_id = int(self.principal.tenant_id or 0)
        present = generated_count(self.tenant_id)
        if present != size:
            sys.exit(f"bench-growth: {self.name} holds {present:,} generated records, not {size:,}; generate it again")
        self.rounds = args.rounds
        self.per_round = max(1, -(-args.iterations // args.rounds))
        self.warmup = max(3, args.iterations // 10)
        self.batch_per_round = max(1, -(-args.batch_facts // args.rounds))
        self.done = 0  # rounds run
        self.before: list[tuple[int, Any, Any]] = []
        with connection.cursor() as cursor:  # the same search state at every size and run (nothing embeds here)
            cursor.execute("DELETE FROM derived_pendingvector WHERE tenant_id = %s", [self.tenant_id])
        self.prepare(size, args.seed)

    def prepare(self, size: int, seed: int) -> None:
        from datetime import timedelta
        from urllib.parse import urlencode

        from django.utils import timezone
        from rest_framework.test import APIClient

        from bench.measure import check_response
        from bench.run import SPAN
        from memory_admin.accounts.services import issue_token
        from memory_admin.memory import reads
        from memory_admin.memory.models import MemoryRecord

        principal, tenant_id, subjects = self.principal, self.tenant_id, subjects_for(size)
        wanted = self.per_round * self.rounds + self.warmup
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(principal, 'bench-growth')}")
        first = "/api/v1/records/?page_size=50"
        check_response(client.get(first))
        keys = sample_keys(tenant_id, subjects, wanted, seed + 1)
        lists = [f"/api/v1/records/?page_size=50&project_id={k.project}&subject_id={k.subject_id}" for k in keys]
        check_response(client.get(lists[0]))

        rng = random.Random(seed)
        high = timezone.now()
        low = high - SPAN - timedelta(days=1)
        span = (high - low).total_seconds()
        asks = [
            (k, low + timedelta(seconds=rng.uniform(0, span)), low + timedelta(seconds=rng.uniform(0, span)))
            for k in keys
        ]

        def as_of(i: int) -> None:
            key, valid_at, known_at = asks[i % len(asks)]
            reads.as_of(principal, key.project, key.subject_id, key.predicate, valid_at=valid_at, known_at=known_at)

        action_keys = sample_keys(tenant_id, subjects, wanted, seed + 2)
        ids = [
            MemoryRecord.objects.filter(
                tenant_id=tenant_id,
                project__key=k.project,
                subject_id=k.subject_id,
                predicate=k.predicate,
                is_head=True,
            ).values_list("pk", flat=True)[0]
            for k in action_keys
        ]
        facts = [
            "/api/v1/facts/current/?"
            + urlencode(
                {"project_id": k.project, "subject_id": k.subject_id, "predicate": k.predicate, "purpose": "action"}
            )
            for k in action_keys
        ]
        self.before = fresh_for_action(ids)
        answer = client.get(facts[0])
        if answer.status_code != 200 or "receipt_id" not in answer.json():
            sys.exit(f"bench-growth: facts/current for action answered {answer.status_code}: {answer.content[:300]!r}")
        searches = [
            "/api/v1/search/?"
            + urlencode({"project_id": k.project, "subject_id": k.subject_id, "q": f"{k.predicate} value", "k": 10})
            for k in keys
        ]
        answer = client.get(searches[0])
        if answer.status_code != 200:
            sys.exit(f"bench-growth: search answered {answer.status_code}: {answer.content[:300]!r}")
        self.reads: list[tuple[str, Callable[[int], object]]] = [
            ("list_first", lambda _: client.get(first)),
            ("list_subject", lambda i: client.get(lists[i % len(lists)])),
            ("as_of", as_of),
            ("action", lambda i: client.get(facts[i % len(facts)])),
            ("search", lambda i: client.get(searches[i % len(searches)])),
        ]
        # Distinct fact keys for every CAS write of the run; a seed of the moment, as earlier runs moved heads.
        self.cas_keys = sample_keys(tenant_id, subjects, wanted, seed + 3 + int(time.time()))

    def round(self) -> dict[str, Any]:
        from bench.measure import timed
        from bench.run import cas_writes

        warmup = self.warmup if self.done == 0 else 0
        offset = self.done * self.per_round
        samples: dict[str, list[float]] = {}
        for key, fn in self.reads:
            samples[key] = timed(shifted(fn, offset), self.per_round, warmup)
        start = 0 if self.done == 0 else self.warmup + offset
        heads = self.cas_keys[start : self.warmup + offset + self.per_round]
        run = cas_writes(self.principal, heads, warmup, f"growth-{os.getpid()}-{self.done}")
        if run.errors or set(run.outcomes) != {"created"}:
            sys.exit(f"bench-growth: CAS writes expected created, got {dict(run.outcomes)}, errors {dict(run.errors)}")
        samples["cas"] = run.samples_ms
        batch_seconds = batch_write(self.principal, self.batch_per_round, warm=self.done == 0, tag=str(self.done))
        self.done += 1
        return {
            "samples": samples,
            "batch": [self.batch_per_round, batch_seconds],
            "load": os.getloadavg()[0],
        }

    def restore(self) -> None:
        if self.before:
            restore_freshness(self.before)
            self.before = []

    def finish(self) -> dict[str, Any]:
        from django.db import connection

        from bench.rechecks import drop_side_effects
        from memory_admin.memory.models import MemoryRecord

        self.restore()
        print(drop_side_effects())
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM derived_pendingvector WHERE tenant_id = %s", [self.tenant_id])
        size_bytes, _ = database_size()
        return {
            "records": MemoryRecord.objects.filter(tenant_id=self.tenant_id).count(),
            "size_mib": size_bytes / 2**20,
            "generated": remembered_generation(self.name),
        }


def shifted(fn: Callable[[int], object], offset: int) -> Callable[[int], object]:
    """fn with the call's index moved on by `offset` (each round reads the next keys)."""

    def call(i: int) -> object:
        return fn(offset + i)

    return call


def batch_write(principal: Any, facts: int, *, warm: bool, tag: str) -> float:
    """Seconds to write `facts` new facts through `assert_facts` (the batch door's function) in batches of
    BATCH_SIZE, after one untimed warm-up batch when `warm`."""
    from datetime import UTC, datetime

    from memory_admin.memory.actions import Assertion
    from memory_admin.memory.batch import assert_facts

    run = f"growth-{os.getpid()}-{int(time.time())}-{tag}"
    valid_from = datetime(2026, 10, 20, tzinfo=UTC)

    def items(first: int, n: int) -> list[Any]:
        return [
            Assertion(
                project_id="proj-00",
                subject_id=f"{run}-{i // 10:06d}",
                predicate=f"g{i % 10}",
                value={"v": i},
                valid_from=valid_from,
                source_canonical_ref=f"bench://growth/{run}/{i}",
                source_revision="r1",
            )
            for i in range(first, first + n)
        ]

    def apply(batch: list[Any]) -> None:
        result = assert_facts(principal, batch)
        wrong = {item.outcome for item in result.items} - {"created"}
        if wrong:
            sys.exit(f"bench-growth: batch items expected created, got {sorted(map(str, wrong))}")

    if warm:
        apply(items(0, min(BATCH_SIZE, 100)))
    seconds, done = 0.0, 0
    while done < facts:
        n = min(BATCH_SIZE, facts - done)
        batch = items(1000 + done, n)
        t0 = time.perf_counter()
        apply(batch)
        seconds += time.perf_counter() - t0
        done += n
    return seconds


# --- The parent: one process per size and phase, then the table ---------------------------------


def worker_command(size: int, phase: str, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        phase,
        "--sizes",
        str(size),
        "--min-free-gb",
        str(args.min_free_gb),
        "--seed",
        str(args.seed),
        "--database-prefix",
        args.database_prefix,
        "--iterations",
        str(args.iterations),
        "--batch-facts",
        str(args.batch_facts),
        "--rounds",
        str(args.rounds),
    ]


def worker_env(base_url: str, size: int, args: argparse.Namespace) -> dict[str, str]:
    return dict(os.environ, DATABASE_URL=database_url(base_url, database_name(size, args.database_prefix)))


def read_answer(proc: subprocess.Popen[str], size: int, args: argparse.Namespace, wanted: str) -> str:
    """Pass the worker's lines through (prefixed with its size) until one starts with `wanted`; exits, naming
    the size's database, when the worker ends first."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(wanted):
            return line[len(wanted) :].strip()
        print(f"[{label(size)}] {line}", end="", flush=True)
    code = proc.wait()
    sys.exit(
        f"bench-growth: the measurement of {label(size)} ({database_name(size, args.database_prefix)}) failed "
        f"(exit {code})"
    )


def measure_interleaved(base_url: str, args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    """One worker per size, all alive at once; then `--rounds` rounds, each asking every size in turn (the order
    rotating) for its share of the calls, so that the machine's load falls on every size alike."""
    procs: dict[int, subprocess.Popen[str]] = {}
    try:
        for size in args.size_list:
            procs[size] = subprocess.Popen(
                worker_command(size, "measure", args),
                env=worker_env(base_url, size, args),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            read_answer(procs[size], size, args, READY)
        samples: dict[int, dict[str, list[float]]] = {size: {} for size in args.size_list}
        batch = {size: [0.0, 0.0] for size in args.size_list}
        loads: list[float] = []
        for r in range(args.rounds):
            order = args.size_list[r % len(args.size_list) :] + args.size_list[: r % len(args.size_list)]
            for size in order:
                proc = procs[size]
                assert proc.stdin is not None
                proc.stdin.write("round\n")
                proc.stdin.flush()
                answer = json.loads(read_answer(proc, size, args, RESULT_PREFIX))
                for key, values in answer["samples"].items():
                    samples[size].setdefault(key, []).extend(values)
                batch[size][0] += answer["batch"][0]
                batch[size][1] += answer["batch"][1]
                loads.append(answer["load"])
            print(f"round {r + 1}/{args.rounds} done (load average {loads[-1]:.2f})", flush=True)
        results: dict[int, dict[str, Any]] = {}
        for size, proc in procs.items():
            assert proc.stdin is not None
            proc.stdin.write("end\n")
            proc.stdin.flush()
            result = json.loads(read_answer(proc, size, args, RESULT_PREFIX))
            read_answer_rest(proc, size)
            figures: dict[str, float] = {}
            for key, values in samples[size].items():
                figures[f"{key}_p50"] = statistics.median(values)
                figures[f"{key}_p95"] = percentile(values, 95)
            figures["batch_facts_per_s"] = batch[size][0] / batch[size][1]
            result["figures"] = figures
            result["load"] = statistics.mean(loads)
            result["calls"] = len(samples[size]["list_first"])
            result["rounds"] = args.rounds
            results[size] = result
        return results
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def read_answer_rest(proc: subprocess.Popen[str], size: int) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"[{label(size)}] {line}", end="", flush=True)
    proc.wait()


def run_worker(base_url: str, size: int, phase: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run this script for one size and phase with DATABASE_URL naming the size's database; its output passes
    through; returns the result it reports (exits when it fails)."""
    with subprocess.Popen(
        worker_command(size, phase, args), env=worker_env(base_url, size, args), stdout=subprocess.PIPE, text=True
    ) as proc:
        result = json.loads(read_answer(proc, size, args, RESULT_PREFIX))
        read_answer_rest(proc, size)
    if proc.returncode:
        sys.exit(f"bench-growth: the {phase} of {label(size)} failed (exit {proc.returncode})")
    return result


# (key of the figure, row label, format); the rows of the table, in order.
ROWS = (
    ("records", "records in the table", "{:,.0f}"),
    ("size_mib", "database on disk, MiB", "{:,.0f}"),
    ("generated", "generation (COPY), s", "{:,.1f}"),
    ("list_first_p50", "API list, first page, p50 ms", "{:.2f}"),
    ("list_first_p95", "API list, first page, p95 ms", "{:.2f}"),
    ("list_subject_p50", "API list, one subject, p50 ms", "{:.2f}"),
    ("list_subject_p95", "API list, one subject, p95 ms", "{:.2f}"),
    ("as_of_p50", "as-of (reads.as_of), p50 ms", "{:.2f}"),
    ("action_p50", "facts/current for action, p50 ms", "{:.2f}"),
    ("search_p50", "search, one subject, p50 ms", "{:.2f}"),
    ("cas_p50", "CAS write (assert_fact), p50 ms", "{:.2f}"),
    ("cas_p95", "CAS write (assert_fact), p95 ms", "{:.2f}"),
    ("batch_facts_per_s", "batch write, facts/s", "{:,.0f}"),
    ("load", "load average (1 min), mean of rounds", "{:.2f}"),
)
LABEL_WIDTH = 36
COLUMN_WIDTH = 12


def growth_table(sizes: list[int], results: dict[int, dict[str, Any]]) -> list[str]:
    """The table's lines: a header of the sizes' labels, then one row per figure ("-" where a figure is unknown,
    such as the generation time of a database generated before it was kept)."""
    lines = ["figure".ljust(LABEL_WIDTH) + "".join(label(size).rjust(COLUMN_WIDTH) for size in sizes)]
    lines.append("-" * len(lines[0]))
    for key, title, fmt in ROWS:
        cells = []
        for size in sizes:
            result = results[size]
            value = result["figures"].get(key, result.get(key))
            cells.append(("-" if value is None else fmt.format(value)).rjust(COLUMN_WIDTH))
        lines.append(title.ljust(LABEL_WIDTH) + "".join(cells))
    return lines


def print_growth_table(sizes: list[int], results: dict[int, dict[str, Any]]) -> None:
    print()
    print(
        f"Growth curve: {', '.join(f'{label(s)} = {s:,}' for s in sizes)} records, {RECORDS_PER_SUBJECT} per subject; "
        f"{next(iter(results.values()))['calls']} timed calls per figure in {next(iter(results.values()))['rounds']} rounds, the sizes in turn "
        f"in each; {os.cpu_count()} CPUs"
    )
    for line in growth_table(sizes, results):
        print(line)
    print("Figures are printed, never asserted (docs/scaling.md reads them).")


def parse_sizes(parser: argparse.ArgumentParser, text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes takes comma-separated record counts, not {text!r}")
    if not sizes or any(s < RECORDS_PER_SUBJECT for s in sizes):
        parser.error(f"--sizes needs at least one size, each >= {RECORDS_PER_SUBJECT}")
    if len({label(s) for s in sizes}) != len(sizes):
        parser.error("--sizes has the same size twice")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="comma-separated record counts (default 1000000,10000000,30000000)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--measure-only", action="store_true", help="never generate; fail when a database is missing")
    mode.add_argument("--generate-only", action="store_true", help="generate what is missing, measure nothing")
    parser.add_argument(
        "--min-free-gb",
        type=float,
        default=25.0,
        help="refuse to generate when the disk would fall below this many GiB free (default 25)",
    )
    parser.add_argument("--iterations", type=int, default=200, help="timed calls per read figure (default 200)")
    parser.add_argument("--batch-facts", type=int, default=2000, help="facts in the timed batch writes (default 2000)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds the calls are split into, every size measured in each round in turn (default 5)",
    )
    parser.add_argument("--seed", type=int, default=42, help="random seed of the data and of the samples")
    parser.add_argument(
        "--database-prefix",
        default=DATABASE_PREFIX,
        help=f"each size's database is this prefix and the size's label (default {DATABASE_PREFIX}: ..._1m, ..._10m)",
    )
    parser.add_argument("--worker", choices=["generate", "measure"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.size_list = parse_sizes(parser, args.sizes)
    if "bench" not in args.database_prefix:  # a mismatched database is dropped and generated again
        parser.error("--database-prefix must contain 'bench' (those databases are dropped when they do not match)")
    if args.iterations < 1 or args.batch_facts < 1 or args.rounds < 1:
        parser.error("--iterations, --batch-facts and --rounds must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        size = args.size_list[0]
        if args.worker == "generate":
            worker_generate(size, args.min_free_gb, args.seed)
        else:
            worker_measure(size, args)
        return
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url.startswith(("postgres://", "postgresql://")):
        sys.exit(
            "bench-growth needs PostgreSQL: set DATABASE_URL=postgres://user@host:port/any (or run make bench-growth)"
        )
    if not args.measure_only:
        for size in args.size_list:
            started = time.perf_counter()
            run_worker(base_url, size, "generate", args)
            print(f"[{label(size)}] ready ({time.perf_counter() - started:.1f} s)", flush=True)
    if args.generate_only:
        return
    print_growth_table(args.size_list, measure_interleaved(base_url, args))


if __name__ == "__main__":
    main()
