"""Performance benchmark of the record store on PostgreSQL (`make bench`).

1. creates the bench database if needed and migrates it;
2. generates the bench tenant's records with COPY, once (kept between runs; `--regenerate` starts over);
3. times the records list (first page, a deep cursor page, a filtered list) through the real API in
   process, as-of lookups through the domain layer, and compare-and-swap writes through
   `assert_fact`, single-process and in parallel processes; then (bench/pages.py) the dashboard's
   records page against the Django admin changelist, and (bench/rechecks.py) the recheck sweep's
   selection `claim_due` and rechecks per second on real Celery workers against a loopback source;
4. prints median/p95 next to the targets. It never asserts timings. `--only`/`--skip` choose benchmarks.

Run: `make bench` or
`DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench .venv/bin/python bench/run.py --records 20000`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python bench/x.py` puts bench/ first on sys.path, where bench/mcp.py would shadow the `mcp` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:  # `python bench/run.py` puts bench/ first, not the repository
    sys.path.insert(0, str(REPO_ROOT))

from bench import cas_floor  # noqa: E402
from bench.measure import (  # noqa: E402
    Figure,
    Head,
    alternating,
    check_response,
    collect_runs,
    path_of,
    print_table,
    queries_per_call,
    sample_heads,
    statement_mode,
    timed,
)
from bench.setup import AGENT, TENANT, bench_principal, choose_cache, setup_django  # noqa: E402

PROJECTS = 10
PREDICATES = 100
SPAN = timedelta(days=5 * 365)  # generated valid times lie in the five years before yesterday
GENERATED_PREFIX = "mem-b-"  # memory_id prefix of generated rows (assert_fact's own ids are mem-<hex>)
COPY_CHUNK_ROWS = 100_000  # rows per COPY statement (each ends at a subject boundary)

# Columns the generator fills, in COPY order. Any other NOT NULL column without a default is refused.
COLUMNS = (
    "id",
    "tenant_id",
    "project_id",
    "memory_id",
    "subject_id",
    "predicate",
    "value",
    "status",
    "status_reason",
    "valid_from",
    "valid_to",
    "asserted_valid_to",
    "valid_to_recorded_at",
    "recorded_from",
    "recorded_to",
    "last_verified_at",
    "recheck_after",
    "retain_until",
    "revision",
    "source_canonical_ref",
    "source_system",
    "source_revision",
    "issuer_id",
    "entered_current",
    "is_head",
    "superseded_by_id",
    "derived_from",
    "source_event_ids",
    "attention",
)

TARGET_LIST_P95_MS = 15.0
TARGET_AS_OF_MEDIAN_MS = 2.0
TARGET_WRITES_PER_S = 500.0
# The read path against its limits, measured in the same run (issue 36, item 1): the list's median against the
# stack's ceiling (a constant answer through the same authentication and throttles), the as-of lookup's median
# against its own SELECT replayed as raw SQL. Printed as the run's last lines (`RATIOS`).
TARGET_LIST_CEILING = 2.0
TARGET_AS_OF_SELECT = 1.5
RATIOS: list[str] = []


# --- Django -------------------------------------------------------------------------------------


def admin_connection(dbname: str = "postgres") -> Any:
    """An autocommit connection as DATABASE_URL's role to the server's `postgres` database (to create or drop
    the bench one), or to `dbname`."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        dbname=dbname,
        autocommit=True,
    )


def prepare_database(regenerate: bool) -> None:
    """Refuse anything but PostgreSQL; create (or with `regenerate`, drop and recreate) the database."""
    from django.conf import settings
    from django.db import connection, connections
    from psycopg import sql

    if connection.vendor != "postgresql":
        sys.exit(
            f"bench needs PostgreSQL, but the database is {connection.vendor!r}.\n"
            "Run `make bench`, or set DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench."
        )
    name = settings.DATABASES["default"]["NAME"]
    connections.close_all()
    with admin_connection() as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None
        if exists and regenerate:
            if "bench" not in name:
                sys.exit(f"Refusing to drop database {name!r}: --regenerate only drops a database named *bench*.")
            print(f"Dropping database {name} (--regenerate)")
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            exists = False
        if not exists:
            print(f"Creating database {name}")
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def migrate() -> None:
    """The documented command: with BENCH_APP_ROLE set it names that role (DATABASE_APP_ROLE), so migrate's
    post_migrate applies the tenant policies and grants the role its DML, as in production (bench/rls.py)."""
    from django.conf import settings
    from django.core.management import call_command

    from bench.rls import app_role

    if app_role():
        settings.DATABASE_APP_ROLE = app_role()
    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    print(f"Migrations applied ({time.perf_counter() - started:.1f} s)")


def server_version() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        return str(cursor.fetchone()[0])


# --- Data generation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    records: int
    subjects: int

    @property
    def projects(self) -> int:
        return min(PROJECTS, self.subjects)

    def records_of(self, subject: int) -> int:
        base, extra = divmod(self.records, self.subjects)
        return base + (1 if subject < extra else 0)


def subject_key(i: int) -> str:
    return f"subj-{i:05d}"


def generated_count(tenant_id: int) -> int:
    from memory_admin.memory.models import MemoryRecord

    return MemoryRecord.objects.filter(tenant_id=tenant_id, memory_id__startswith=GENERATED_PREFIX).count()


def matches_layout(tenant_id: int, layout: Layout) -> bool:
    """Whether the generated data has the asked-for size: the record count, then the last subject."""
    from memory_admin.memory.models import MemoryRecord

    if generated_count(tenant_id) != layout.records:
        return False
    subjects = MemoryRecord.objects.filter(tenant_id=tenant_id)
    return (
        subjects.filter(subject_id=subject_key(layout.subjects - 1)).exists()
        and not subjects.filter(subject_id=subject_key(layout.subjects)).exists()
    )


def check_columns() -> None:
    """Fail loudly when the table gained a NOT NULL column the generator does not fill."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, is_nullable, column_default IS NOT NULL OR is_identity = 'YES' "
            "FROM information_schema.columns WHERE table_name = 'memory_memoryrecord' "
            "AND table_schema = current_schema()"
        )
        rows = cursor.fetchall()
    present = {name for name, _, _ in rows}
    missing = [c for c in COLUMNS if c not in present]
    unfilled = [name for name, nullable, has_default in rows if nullable == "NO" and not has_default]
    unfilled = [name for name in unfilled if name not in COLUMNS]
    if missing or unfilled:
        sys.exit(
            "memory_memoryrecord no longer matches the generator "
            f"(columns gone: {missing or 'none'}; NOT NULL columns not filled: {unfilled or 'none'}). "
            "Update COLUMNS in bench/run.py."
        )


def generate_lines(
    layout: Layout,
    *,
    first_id: int,
    tenant_id: int,
    issuer_id: int,
    project_ids: list[int],
    end: datetime,
    seed: int,
) -> Iterator[tuple[int, list[str]]]:
    """COPY text lines, one subject at a time: (subject index, lines).

    Each fact key (subject, predicate) gets a chain of revisions 1..k at distinct whole hours of valid
    time, recorded 0-59 minutes after they became valid. Only the last revision is the accepted head;
    every earlier one is superseded by the next one, its validity cut at the next one's valid_from,
    the cut recorded when the next one was.
    """
    rng = random.Random(seed)
    start = end - SPAN
    span_hours = int(SPAN.total_seconds() // 3600)
    hour_text: dict[int, str] = {}

    def hour(h: int) -> str:
        text = hour_text.get(h)
        if text is None:
            text = hour_text[h] = (start + timedelta(hours=h)).strftime("%Y-%m-%d %H")
        return text

    next_id = first_id
    for s in range(layout.subjects):
        subject = subject_key(s)
        project_id = project_ids[s % len(project_ids)]
        source = f"bench://crm/{subject}"  # generated in clear (as the values), its system `bench` beside it
        n = layout.records_of(s)
        facts = min(PREDICATES, max(1, round(n / 3)))
        chains = [1] * facts
        for _ in range(n - facts):
            chains[rng.randrange(facts)] += 1
        predicates = rng.sample(range(PREDICATES), facts)
        lines: list[str] = []
        for predicate_no, k in zip(predicates, chains, strict=True):
            predicate = f"p{predicate_no:02d}"
            hours = sorted(rng.sample(range(span_hours), k))
            valid_from = [f"{hour(h)}:00:00+00" for h in hours]
            recorded_from = []
            for h in hours:
                lag = rng.randrange(3600)
                recorded_from.append(f"{hour(h)}:{lag // 60:02d}:{lag % 60:02d}+00")
            for j in range(k):
                rid = next_id + j
                rev = j + 1
                if j < k - 1:  # superseded by the next revision
                    status, valid_to, cut_at, head, successor = (
                        "superseded",
                        valid_from[j + 1],
                        recorded_from[j + 1],
                        "f",
                        str(rid + 1),
                    )
                else:
                    status, valid_to, cut_at, head, successor = "accepted", r"\N", r"\N", "t", r"\N"
                lines.append(
                    f'{rid}\t{tenant_id}\t{project_id}\t{GENERATED_PREFIX}{rid}\t{subject}\t{predicate}\t"v{rid}"\t'
                    f"{status}\t\t{valid_from[j]}\t{valid_to}\t\\N\t{cut_at}\t{recorded_from[j]}\t{cut_at}\t"
                    f"\\N\t\\N\t\\N\t{rev}\t{source}\tbench\tr{rev}\t{issuer_id}\tt\t{head}\t{successor}\t[]\t[]\t\n"
                )
            next_id += k
        yield s, lines


def generate(layout: Layout, tenant_id: int, issuer_id: int, seed: int, *, analyze: bool = True) -> float:
    """COPY the layout's records into memory_memoryrecord in one transaction; returns the seconds taken. Then
    VACUUM ANALYZE, unless `analyze` is false (the planner's statistics then have not seen these records)."""
    from django.db import DatabaseError, connection, transaction
    from django.utils import timezone

    from memory_admin.memory.models import Project

    check_columns()
    started = time.perf_counter()
    end = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    print(
        f"Generating {layout.records:,} records: {layout.subjects:,} subjects in {layout.projects} projects, "
        f"predicates p00..p{PREDICATES - 1:02d}, valid time {(end - SPAN):%Y-%m-%d}..{end:%Y-%m-%d}"
    )
    copy_sql = f"COPY memory_memoryrecord ({', '.join(COLUMNS)}) FROM STDIN"
    with transaction.atomic():
        project_ids = []
        for p in range(layout.projects):
            project, _ = Project.objects.get_or_create(tenant_id=tenant_id, key=f"proj-{p:02d}")
            project_ids.append(project.pk)
        with connection.cursor() as cursor:
            cursor.execute("SELECT coalesce(max(id), 0) + 1 FROM memory_memoryrecord")
            first_id = int(cursor.fetchone()[0])
        connection.ensure_connection()
        raw = connection.connection  # the psycopg connection, inside Django's transaction
        # Row triggers off for the load (a superuser may): the deferred foreign-key checks would queue
        # one event per row per key (40M at 10M rows) and run them one by one at commit. They are checked
        # set-based below instead; the exclusion and unique constraints are indexes and still hold.
        with connection.cursor() as cursor:
            try:
                with transaction.atomic():
                    cursor.execute("SET LOCAL session_replication_role = replica")
                replica = True
            except DatabaseError as exc:
                print(f"  (row triggers stay on: {exc})")
                replica = False
        deferred = drop_plain_indexes("memory_memoryrecord")
        rows = 0
        chunks = generate_lines(
            layout,
            first_id=first_id,
            tenant_id=tenant_id,
            issuer_id=issuer_id,
            project_ids=project_ids,
            end=end,
            seed=seed,
        )
        pending = next(chunks, None)
        while pending is not None:
            chunk_rows = 0
            with raw.cursor() as cur, cur.copy(copy_sql) as copy:
                # Chunks end at subject boundaries, so a superseded_by reference never crosses a COPY.
                while pending is not None and chunk_rows < COPY_CHUNK_ROWS:
                    _, lines = pending
                    copy.write("".join(lines))
                    chunk_rows += len(lines)
                    pending = next(chunks, None)
            rows += chunk_rows
            elapsed = time.perf_counter() - started
            print(f"  {rows:>10,} rows copied  ({elapsed:6.1f} s, {rows / elapsed:,.0f} rows/s)", flush=True)
        copied = time.perf_counter()
        if deferred:
            rebuild_indexes(deferred)
            print(f"  {len(deferred)} indexes built ({time.perf_counter() - copied:.1f} s)", flush=True)
            copied = time.perf_counter()
        if replica:
            check_foreign_keys(first_id)
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = origin")
            from memory_admin.memory import stats

            print(f"  foreign keys checked ({time.perf_counter() - copied:.1f} s); counting the overview's totals...")
            stats.recount(tenant_id)
            copied = time.perf_counter()
        print("  committing (deferred constraints checked now)...", flush=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('memory_memoryrecord', 'id'), "
            "(SELECT max(id) FROM memory_memoryrecord))"
        )
    committed = time.perf_counter()
    if not analyze:
        print(f"  committed ({committed - copied:.1f} s); not analyzed; generation took {committed - started:.1f} s")
        return committed - started
    print(f"  committed ({committed - copied:.1f} s); VACUUM ANALYZE...", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) memory_memoryrecord")
        cursor.execute("ANALYZE")
        # Flush the load's dirty pages now rather than during the measurements (needs a superuser
        # or pg_checkpoint; without it the first figures after a generation may be noisier).
        try:
            cursor.execute("CHECKPOINT")
        except DatabaseError as exc:
            print(f"  (no CHECKPOINT: {exc})")
    total = time.perf_counter() - started
    print(
        f"  vacuumed, analyzed, checkpointed ({time.perf_counter() - committed:.1f} s); generation took {total:.1f} s"
    )
    return total


def prewarm() -> None:
    """Read the records table and its indexes into the OS page cache (pg_prewarm 'read'), so that the first
    figures after a generation or a restart measure the queries, not the disk."""
    from django.db import DatabaseError, connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            cursor.execute(
                "SELECT sum(pg_prewarm(oid, 'read')), pg_size_pretty(sum(pg_relation_size(oid))) FROM pg_class "
                "WHERE oid = 'memory_memoryrecord'::regclass "
                "OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'memory_memoryrecord'::regclass)"
            )
            _, size = cursor.fetchone()
        except DatabaseError as exc:
            print(f"(no prewarm: {exc})")
            return
    print(f"Prewarmed the records table and its indexes ({size}) in {time.perf_counter() - started:.1f} s")


def table_sizes() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_size_pretty(pg_relation_size('memory_memoryrecord')), "
            "pg_size_pretty(pg_indexes_size('memory_memoryrecord')), "
            "pg_size_pretty(pg_total_relation_size('memory_memoryrecord'))"
        )
        table, indexes, total = cursor.fetchone()
    return f"memory_memoryrecord: table {table}, indexes {indexes}, total {total}"


def drop_plain_indexes(table: str) -> list[str]:
    """Drop `table`'s indexes that back no constraint (inside the generation's transaction) and return their
    definitions: a COPY into a table with its 13 secondary indexes slowed from 11,600 to 2,500 rows/s as they grew
    (30M records would take hours); built once after the load, as `rebuild_indexes` does, they cost minutes.
    The primary key and the constraints' own indexes (unique memory_id) stay and keep checking every row."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) ORDER BY 1",
            [table],
        )
        found = cursor.fetchall()
        for name, _definition in found:
            cursor.execute(f"DROP INDEX {name}")  # regclass text: PostgreSQL quotes it where it must
    return [definition for _name, definition in found]


def rebuild_indexes(definitions: list[str]) -> None:
    """Create again the indexes `drop_plain_indexes` dropped, from PostgreSQL's own definitions of them (a unique
    one checks its rows as it is built)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL maintenance_work_mem = '1GB'")
        for definition in definitions:
            cursor.execute(definition)


def check_foreign_keys(first_id: int) -> None:
    """The foreign keys of the rows just copied (from `first_id` on), checked as a few set-based queries."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT
              (SELECT count(*) FROM (SELECT DISTINCT tenant_id FROM memory_memoryrecord WHERE id >= %(first)s) t
               WHERE NOT EXISTS (SELECT 1 FROM accounts_tenant a WHERE a.id = t.tenant_id)),
              (SELECT count(*) FROM (SELECT DISTINCT project_id FROM memory_memoryrecord WHERE id >= %(first)s) p
               WHERE NOT EXISTS (SELECT 1 FROM memory_project m WHERE m.id = p.project_id)),
              (SELECT count(*) FROM (SELECT DISTINCT issuer_id FROM memory_memoryrecord WHERE id >= %(first)s) i
               WHERE NOT EXISTS (SELECT 1 FROM accounts_principal a WHERE a.id = i.issuer_id)),
              (SELECT count(*) FROM memory_memoryrecord r WHERE r.id >= %(first)s AND r.superseded_by_id IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM memory_memoryrecord s WHERE s.id = r.superseded_by_id))
            """,
            {"first": first_id},
        )
        dangling = cursor.fetchone()
    if any(dangling):
        sys.exit(f"Generated rows reference missing rows (tenant, project, issuer, superseded_by): {dangling}")


def check_generated(tenant_id: int) -> None:
    """The invariants the generator promises (the constraints themselves were checked by PostgreSQL)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT
              count(*) FILTER (WHERE is_head AND status <> 'accepted'),
              count(*) FILTER (WHERE NOT is_head AND superseded_by_id IS NULL),
              count(*) FILTER (WHERE status = 'accepted' AND valid_to IS NOT NULL)
            FROM memory_memoryrecord WHERE tenant_id = %s AND memory_id LIKE %s
            """,
            [tenant_id, GENERATED_PREFIX + "%"],
        )
        bad = cursor.fetchone()
    if any(bad):
        sys.exit(f"Generated data is inconsistent: {bad} (non-accepted heads, orphans, closed accepted rows)")


# --- Measurement --------------------------------------------------------------------------------


def with_cpu(fn: Callable[[int], object]) -> tuple[Callable[[int], object], list[float]]:
    """`fn`, and the CPU milliseconds this process spends in each timed call of it (warm-up calls, with a
    negative i, are not kept). On a shared machine wall time includes waiting for a core; this is the work of
    the request itself on the client side (Django, DRF, the driver), PostgreSQL's share excluded."""
    cpu: list[float] = []

    def call(i: int) -> object:
        started = time.process_time()
        result = fn(i)
        if i >= 0:
            cpu.append((time.process_time() - started) * 1000)
        return result

    return call, cpu


def cpu_note(cpu: list[float]) -> str:
    return f"CPU {statistics.median(cpu):.2f} ms median" if cpu else ""


CEILING_URL = "/api/v1/bench/ceiling/"


def captured_selects(call: Callable[[], object]) -> list[str]:
    """The SELECTs one `call()` sends, as sent (values merged in)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]


def sql_floor_ms(call: Callable[[], object], iterations: int) -> tuple[float, int]:
    """The SELECTs one `call()` sends, captured once and replayed as they were sent (values merged in) through
    the psycopg connection, no ORM: median milliseconds per replay of them all, and how many there are. What
    the database and the driver take of the call; the rest is the app's."""
    from django.db import connection

    selects = captured_selects(call)
    connection.ensure_connection()
    raw = connection.connection
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        with raw.cursor() as cursor:
            for sql in selects:
                cursor.execute(sql)
                cursor.fetchall()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples), len(selects)


def limits_note(figure: Figure, ceiling_ms: float, call: Callable[[], object], iterations: int) -> str:
    """A request's two limits measured in the same run: the stack's ceiling (a constant answer through the same
    authentication, throttles and rendering, `memory_admin/api/ceiling.py`) and its own SQL as raw SQL."""
    sql_ms, statements = sql_floor_ms(call, iterations)
    return (
        f"{figure.median / ceiling_ms:.1f}x the stack's ceiling ({ceiling_ms:.2f} ms, a constant answer); "
        f"its {statements} SELECTs as raw SQL {sql_ms:.2f} ms ({figure.median / sql_ms:.1f}x)"
    )


def ceiling_ratio(
    name: str, client: Any, urls: str | list[str], iterations: int, warmup: int, target: float | None = None
) -> str:
    """The request's median over the ceiling's, the two timed in turns (`alternating`): the line printed at the end
    of the run (issue 36, item 1)."""
    paths = [urls] if isinstance(urls, str) else urls
    request, ceiling = alternating(
        lambda i: client.get(paths[i % len(paths)]), lambda _: client.get(CEILING_URL), iterations, warmup
    )
    ratio = statistics.median(request) / statistics.median(ceiling)
    aim = f" (target <= {target:g}x)" if target is not None else ""
    return (
        f"{name}: {ratio:.1f}x the ceiling{aim} "
        f"[{statistics.median(request):.2f} ms vs {statistics.median(ceiling):.2f} ms, timed in turns]"
    )


def bench_api(principal: Any, tenant_id: int, iterations: int, warmup: int, seed: int) -> list[Figure]:
    from rest_framework.test import APIClient

    from memory_admin.accounts.services import issue_token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(principal, 'bench')}")
    first = "/api/v1/records/?page_size=50"
    check_response(client.get(first))
    get_first, cpu = with_cpu(lambda _: client.get(first))
    figures = [
        Figure(
            "records list, first page (API)",
            timed(get_first, iterations, warmup),
            f"p95 <= {TARGET_LIST_P95_MS:g} ms",
            note=f"{queries_per_call(lambda: client.get(first))} queries; {cpu_note(cpu)}",
        )
    ]
    figures[0].met = figures[0].p95 <= TARGET_LIST_P95_MS

    url, depth = first, 0
    for _ in range(200):
        nxt = client.get(url).json()["next"]
        if not nxt:
            break
        url, depth = path_of(nxt), depth + 1
    check_response(client.get(url))
    get_deep, cpu = with_cpu(lambda _: client.get(url))
    deep = Figure(
        f"records list, cursor page {depth + 1} (API)",
        timed(get_deep, iterations, warmup),
        f"p95 <= {TARGET_LIST_P95_MS:g} ms",
    )
    deep.note = cpu_note(cpu)
    deep.met = deep.p95 <= TARGET_LIST_P95_MS
    figures.append(deep)

    check_response(client.get(CEILING_URL), expect_results=False)
    ceiling = statistics.median(timed(lambda _: client.get(CEILING_URL), iterations, warmup))
    figures[0].note += "; " + limits_note(figures[0], ceiling, lambda: client.get(first), iterations)
    deep.note += "; " + limits_note(deep, ceiling, lambda: client.get(url), iterations)
    RATIOS.append(ceiling_ratio("list first page", client, first, iterations, warmup, TARGET_LIST_CEILING))
    RATIOS.append(ceiling_ratio(f"list cursor page {depth + 1}", client, url, iterations, warmup))

    keys = sample_heads(tenant_id, iterations + warmup, seed + 1)
    urls = [f"/api/v1/records/?page_size=50&project_id={k.project}&subject_id={k.subject_id}" for k in keys]
    check_response(client.get(urls[0]))
    get_filtered, cpu = with_cpu(lambda i: client.get(urls[i % len(urls)]))
    filtered = Figure(
        "records list, ?project_id&subject_id (API)",
        timed(get_filtered, iterations, warmup),
        f"p95 <= {TARGET_LIST_P95_MS:g} ms",
    )
    filtered.note = f"random subjects; {cpu_note(cpu)}; " + limits_note(
        filtered, ceiling, lambda: client.get(urls[0]), iterations
    )
    filtered.met = filtered.p95 <= TARGET_LIST_P95_MS
    figures.append(filtered)
    RATIOS.append(ceiling_ratio("list ?project_id&subject_id", client, urls, iterations, warmup))
    return figures


def bench_as_of(principal: Any, tenant_id: int, iterations: int, warmup: int, seed: int) -> Figure:
    from django.db import connection

    from memory_admin.memory import reads

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(valid_from), max(recorded_from) FROM memory_memoryrecord WHERE tenant_id = %s",
            [tenant_id],
        )
        low, high = cursor.fetchone()
    rng = random.Random(seed)
    keys = sample_heads(tenant_id, iterations + warmup, seed + 2)
    span = (high - low).total_seconds()

    def instant() -> datetime:
        return low + timedelta(seconds=rng.uniform(0, span))

    asks = [(k, instant(), instant()) for k in keys]
    hits = 0

    def lookup(i: int) -> None:
        nonlocal hits
        key, valid_at, known_at = asks[i % len(asks)]
        record = reads.as_of(
            principal, key.project, key.subject_id, key.predicate, valid_at=valid_at, known_at=known_at
        )
        if record is not None and i >= 0:
            hits += 1

    timed_lookup, cpu = with_cpu(lookup)
    figure = Figure(
        "as-of lookup (reads.as_of)",
        timed(timed_lookup, iterations, warmup),
        f"median <= {TARGET_AS_OF_MEDIAN_MS:g} ms",
    )
    figure.met = figure.median <= TARGET_AS_OF_MEDIAN_MS
    sql_ms, statements = sql_floor_ms(lambda: lookup(-1), iterations)
    figure.note = (
        f"{hits}/{iterations} found a record; {cpu_note(cpu)}; its {statements} SELECTs as raw SQL "
        f"{sql_ms:.2f} ms ({figure.median / sql_ms:.1f}x)"
    )
    # The ratio: each ask's lookup and its own SELECT replayed as raw SQL, timed in turns.
    selects = [captured_selects(lambda i=i: lookup(i)) for i in range(iterations)]  # type: ignore[misc]
    raw = connection.connection

    def replay(i: int) -> None:
        with raw.cursor() as cursor:
            for sql in selects[i % len(selects)]:
                cursor.execute(sql)
                cursor.fetchall()

    looked, replayed = alternating(lookup, replay, iterations, warmup)
    ratio = statistics.median(looked) / statistics.median(replayed)
    RATIOS.append(
        f"as-of: {ratio:.2f}x its SELECT (target <= {TARGET_AS_OF_SELECT:g}x) "
        f"[{statistics.median(looked):.2f} ms vs {statistics.median(replayed):.2f} ms, timed in turns]"
    )
    return figure


@dataclass
class WriteRun:
    samples_ms: list[float]
    started: float
    finished: float
    cpu_s: float  # this process's CPU time over the timed writes (Django and psycopg, not the server)
    outcomes: Counter[str]
    errors: Counter[str]


def cas_writes(
    principal: Any, heads: list[Head], warmup: int, tag: str, ready: Callable[[], object] | None = None
) -> WriteRun:
    """assert_fact with expected_revision = the head's revision and the next source revision.

    The first `warmup` heads are written untimed; then `ready()` (a barrier between writer processes).
    Errors of warm-up writes are kept in the counts: any error is a finding.
    """
    from django.utils import timezone

    from memory_admin.memory.actions import Assertion, assert_fact

    outcomes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    samples: list[float] = []

    def write(i: int, head: Head) -> None:
        assertion = Assertion(
            project_id=head.project,
            subject_id=head.subject_id,
            predicate=head.predicate,
            value=f"{tag}-{i}",
            valid_from=timezone.now(),
            source_canonical_ref=head.source_ref,
            source_revision=f"r{int(head.source_revision.lstrip('r')) + 1}",
            expected_revision=head.revision,
        )
        try:
            outcomes[assert_fact(principal, assertion).outcome.value] += 1
        except Exception as exc:  # reported, never hidden: a failed write is a finding
            errors[f"{type(exc).__name__}: {str(exc)[:160]}"] += 1

    for i, head in enumerate(heads[:warmup]):
        write(i, head)
    outcomes.clear()
    if ready is not None:
        ready()
    started, cpu = time.perf_counter(), time.process_time()
    for i, head in enumerate(heads[warmup:], start=warmup):
        t0 = time.perf_counter()
        write(i, head)
        samples.append((time.perf_counter() - t0) * 1000)
    return WriteRun(samples, started, time.perf_counter(), time.process_time() - cpu, outcomes, errors)


def _write_worker(heads: list[Head], warmup: int, tag: str, barrier: Any, results: Any) -> None:
    """One writer process: its own Django and database connection, its own fact keys."""
    setup_django()
    principal = bench_principal()
    from bench.rls import as_app_role

    as_app_role(int(principal.tenant_id))  # BENCH_APP_ROLE: as the non-owner role, like the parent
    from django.db import connection

    connection.ensure_connection()
    run = cas_writes(principal, heads, warmup, tag, ready=barrier.wait)
    connection.close()
    results.put(run)


def verify_writes(tenant_id: int, heads: list[Head]) -> str:
    """Each written fact key: one head at revision+1, accepted, superseding the old head."""
    from memory_admin.memory.models import MemoryRecord

    problems = 0
    for head in heads:
        rows = {
            r.revision: r
            for r in MemoryRecord.objects.filter(
                tenant_id=tenant_id,
                project__key=head.project,
                subject_id=head.subject_id,
                predicate=head.predicate,
                revision__gte=head.revision,
            )
        }
        old, new = rows.get(head.revision), rows.get(head.revision + 1)
        ok = (
            old is not None
            and new is not None
            and new.is_head
            and new.status == "accepted"
            and not old.is_head
            and old.status == "superseded"
            and old.superseded_by_id == new.pk
            and old.valid_to == new.valid_from
        )
        problems += not ok
    return f"{len(heads) - problems}/{len(heads)} sampled writes verified in the database"


def bench_writes(
    principal: Any, tenant_id: int, writes: int, processes: int, warmup: int, seed: int
) -> tuple[list[Figure], list[str]]:
    per_process = max(1, writes // processes)
    notes: list[str] = []
    figures: list[Figure] = []

    heads = sample_heads(tenant_id, per_process + warmup, seed + 3)
    single = cas_writes(principal, heads, warmup, f"bench-{seed}-s")
    rate = len(single.samples_ms) / (single.finished - single.started)
    figures.append(
        Figure(
            "CAS write (assert_fact), 1 process",
            single.samples_ms,
            note=f"{rate:,.0f} writes/s",
        )
    )
    notes.append(f"1 process: outcomes {dict(single.outcomes)}; errors {dict(single.errors) or 'none'}")
    client_cpu = single.cpu_s * 1000 / len(single.samples_ms)
    notes.append(f"1 process: client-side CPU (Python) {client_cpu:.2f} ms per write")
    notes.append("1 process: " + verify_writes(tenant_id, heads[warmup:][:50]))
    # The floor: the same statements as raw SQL, one transaction per write, right after (bench/cas_floor.py).
    floor_figures, floor_notes = cas_floor.floor_single(principal, tenant_id, per_process, warmup, seed, rate)
    figures += floor_figures
    notes += floor_notes

    from django.db import connection

    connection.close()  # children connect on their own; nothing is shared with them
    heads = sample_heads(tenant_id, (per_process + warmup) * processes, seed + 4)
    parts = [heads[p::processes] for p in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_write_worker, args=(part, warmup, f"bench-{seed}-m{p}", barrier, results))
        for p, part in enumerate(parts)
    ]
    runs: list[WriteRun] = collect_runs(workers, results, "writer")
    wall = max(r.finished for r in runs) - min(r.started for r in runs)
    total = sum(len(r.samples_ms) for r in runs)
    rate = total / wall
    samples = [s for r in runs for s in r.samples_ms]
    parallel = Figure(
        f"CAS write (assert_fact), {processes} processes",
        samples,
        f">= {TARGET_WRITES_PER_S:g} writes/s",
        met=rate >= TARGET_WRITES_PER_S,
        note=f"{rate:,.0f} writes/s ({total} writes in {wall:.2f} s)",
    )
    figures.append(parallel)
    outcomes = sum((r.outcomes for r in runs), Counter[str]())
    errors = sum((r.errors for r in runs), Counter[str]())
    notes.append(f"{processes} processes: outcomes {dict(outcomes)}; errors {dict(errors) or 'none'}")
    client_cpu = sum(r.cpu_s for r in runs) * 1000 / total
    notes.append(f"{processes} processes: client-side CPU (Python) {client_cpu:.2f} ms per write")
    notes.append(
        f"{processes} processes: " + verify_writes(tenant_id, [h for part in parts for h in part[warmup:]][:50])
    )
    more_figures, more_notes = cas_floor.floor_parallel(tenant_id, per_process, processes, warmup, seed, rate)
    return figures + more_figures, notes + more_notes


# --- Report -------------------------------------------------------------------------------------


BENCHMARKS = {
    "api": "records list through the API",
    "asof": "as-of lookups",
    "writes": "CAS writes, 1 process then --processes",
    "dashboard": "dashboard records page vs Django admin changelist",
    "claim": "recheck sweep selection (claim_due)",
    "rechecks": "rechecks per second on Celery workers against a loopback canonical source",
}


def selection(parser: argparse.ArgumentParser, only: str | None, skip: str | None) -> list[str]:
    def names(text: str) -> set[str]:
        given = {n.strip() for n in text.split(",") if n.strip()}
        unknown = given - set(BENCHMARKS)
        if unknown:
            parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose among {', '.join(BENCHMARKS)}")
        return given

    chosen = names(only) if only else set(BENCHMARKS)
    chosen -= names(skip) if skip else set()
    if not chosen:
        parser.error("--only/--skip leave no benchmark to run")
    return [name for name in BENCHMARKS if name in chosen]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    epilog = "benchmarks (all by default): " + "; ".join(f"{k}: {v}" for k, v in BENCHMARKS.items())
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="generated records (default 1,000,000)")
    parser.add_argument("--subjects", type=int, default=10_000, help="subjects they are spread over (default 10,000)")
    parser.add_argument("--only", metavar="NAMES", help=f"comma-separated benchmarks to run ({','.join(BENCHMARKS)})")
    parser.add_argument("--skip", metavar="NAMES", help="comma-separated benchmarks not to run")
    parser.add_argument("--iterations", type=int, default=200, help="timed calls per read benchmark (default 200)")
    parser.add_argument("--writes", type=int, default=2000, help="CAS writes in the parallel run (default 2000)")
    parser.add_argument("--processes", type=int, default=2, help="writer processes in the parallel run (default 2)")
    parser.add_argument(
        "--page-iterations", type=int, default=50, help="timed requests per dashboard/admin page (default 50)"
    )
    parser.add_argument(
        "--due", type=int, default=100_000, help="accepted heads made due for recheck (default 100,000)"
    )
    parser.add_argument("--claim-runs", type=int, default=3, help="timed claim_due(limit=--due) calls (default 3)")
    parser.add_argument("--claim-batch", type=int, default=1000, help="claim_due batch size (default 1000)")
    parser.add_argument("--rechecks", type=int, default=3000, help="records rechecked on Celery (default 3000)")
    parser.add_argument("--recheck-workers", type=int, default=4, help="Celery worker processes (default 4)")
    parser.add_argument(
        "--celery-pool",
        choices=["prefork", "solo"],
        default="prefork",
        help="prefork: one worker with --recheck-workers children (default); solo: that many solo workers",
    )
    parser.add_argument(
        "--broker", default="redis://127.0.0.1:6379/14", help="Celery broker (default redis://127.0.0.1:6379/14)"
    )
    parser.add_argument(
        "--cache",
        default=os.environ.get("BENCH_CACHE_URL", BENCH_CACHE),
        help=f"CACHE_URL of the run (default $BENCH_CACHE_URL or {BENCH_CACHE}, with a key prefix of the run, as in "
        "production; the embedded file cache when Redis does not answer)",
    )
    parser.add_argument("--seed", type=int, default=42, help="random seed of the data and of the samples")
    parser.add_argument(
        "--regenerate", action="store_true", help="drop and recreate the bench database, then generate the data"
    )
    parser.add_argument(
        "--prewarm", action="store_true", help="read the records table and indexes into the OS cache first"
    )
    args = parser.parse_args(argv)
    args.benchmarks = selection(parser, args.only, args.skip)
    if args.subjects < 1 or args.records < args.subjects:
        parser.error("need --subjects >= 1 and --records >= --subjects")
    positive = ["iterations", "writes", "processes", "page_iterations", "due", "claim_runs", "claim_batch"]
    if any(getattr(args, name) < 1 for name in [*positive, "rechecks", "recheck_workers"]):
        parser.error(
            "--iterations, --writes, --processes, --page-iterations, --due, --claim-runs, --claim-batch, "
            "--rechecks and --recheck-workers must be positive"
        )
    return args


BENCH_CACHE = "redis://127.0.0.1:6379/13"
CACHE_NOTE: list[str] = []


def isolate(broker: str, cache: str = "") -> Path:
    """Keep the run's side effects to itself; returns its VAR_DIR, a new temporary directory.

    Set in os.environ before Django starts (the writer processes and Celery workers inherit it):
    VAR_DIR, VECTOR_INDEX_PATH and BACKUP_DIR under that directory, so nothing is written to the
    project's var/ (the file cache, the vector index); and Celery on `broker` with a queue of this run
    (`bench-<pid>`): assert_fact enqueues a vector refresh per write after commit, and those tasks must
    reach neither the development broker (var/broker) nor the recheck workers. Nothing consumes that
    queue; it is dropped at the end. With no broker answering, an in-memory broker takes them.
    And the cache (`--cache`, what the API's throttles count in on every request): a local Redis with a key
    prefix of this run, as production runs; the embedded file cache under VAR_DIR when Redis does not answer
    (the two throttle counters of a request: 0.99 ms median on the file cache, 0.68 ms on Redis, here).
    """
    from bench.rechecks import BROKER_PROBLEM, ensure_broker

    var_dir = Path(tempfile.mkdtemp(prefix=f"bench-run-{os.getpid()}-"))
    os.environ["VAR_DIR"] = str(var_dir)
    os.environ["VECTOR_INDEX_PATH"] = str(var_dir / "vectors")
    os.environ["BACKUP_DIR"] = str(var_dir / "backups")
    problem = ensure_broker(broker)
    if problem:
        BROKER_PROBLEM.append(problem)
    os.environ["CELERY_BROKER_URL"] = "memory://" if problem else broker
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = f"bench-{os.getpid()}"
    os.environ["BENCH_CEILING_VIEW"] = "1"  # the API figures' ratio to the stack's ceiling (`limits_note`)
    # Persistent connections, as production runs (docs/deploying.md, step 8); with them the hot reads are prepared
    # on the server (settings.PREPARED_READS). DB_CONN_MAX_AGE=0 DB_PREPARED_READS=0 measure without.
    os.environ.setdefault("DB_CONN_MAX_AGE", "600")
    # The throttles still count every request (the same classes on every view, the ceiling's too) but must not
    # refuse the bench's thousands of reads a minute (as bench/load.py).
    os.environ.setdefault("API_THROTTLE_READS", "100000000/min")
    os.environ.setdefault("API_THROTTLE_READS_PER_ADDRESS", "100000000/min")
    if cache:
        url, why = choose_cache(cache)
        if url == "locmem://":  # Redis down: keep the embedded default rather than a per-process cache
            CACHE_NOTE.append(f"cache: the embedded file cache under VAR_DIR ({why.removeprefix('locmem: ')})")
        else:
            os.environ["CACHE_URL"] = url
            os.environ["CACHE_KEY_PREFIX"] = f"bench-run-{os.getpid()}"
            CACHE_NOTE.append(f"cache: {url} with key prefix bench-run-{os.getpid()} ({why})")
    return var_dir


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    var_dir = isolate(args.broker, args.cache)
    try:
        run_benchmarks(args)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
        drop_cache_keys()


def drop_cache_keys() -> None:
    """Delete the run's keys from the Redis cache (throttle counters, cached answers); nothing else is touched."""
    prefix, url = os.environ.get("CACHE_KEY_PREFIX", ""), os.environ.get("CACHE_URL", "")
    if not (prefix.startswith("bench-run-") and url.startswith("redis://")):
        return
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


def run_benchmarks(args: argparse.Namespace) -> None:
    run = set(args.benchmarks)
    setup_django()
    prepare_database(args.regenerate)
    migrate()

    from django.conf import settings
    from django.db import connection

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.memory.models import MemoryRecord

    layout = Layout(args.records, args.subjects)
    principal = ensure_principal(TENANT, AGENT, ["agent"])
    tenant_id = int(principal.tenant_id or 0)
    generation = "kept from an earlier run"
    present = generated_count(tenant_id)
    if present and not matches_layout(tenant_id, layout):
        print(f"The bench tenant holds {present:,} generated records, not {layout.records:,} records over ", end="")
        print(f"{layout.subjects:,} subjects: starting over.")
        prepare_database(regenerate=True)
        migrate()
        principal = ensure_principal(TENANT, AGENT, ["agent"])
        tenant_id = int(principal.tenant_id or 0)
        present = 0
    if present == 0:
        generation = f"generated in {generate(layout, tenant_id, principal.pk, args.seed):.1f} s"
    else:
        print(f"Bench data present ({present:,} generated records); use --regenerate to start over")
    check_generated(tenant_id)
    if args.prewarm:
        prewarm()
    from bench.rls import as_app_role

    if as_app_role(tenant_id):  # BENCH_APP_ROLE: measure as the non-owner role, under row-level security
        print(f"Connected as {os.environ['BENCH_APP_ROLE']} under row-level security (tenant {tenant_id} set)")
    principal = bench_principal()

    warmup = max(5, args.iterations // 10)
    page_warmup = max(3, args.page_iterations // 10)
    total = MemoryRecord.objects.filter(tenant_id=tenant_id).count()
    heads = MemoryRecord.objects.filter(tenant_id=tenant_id, is_head=True).count()
    print()
    print(f"PostgreSQL {server_version()}, database {settings.DATABASES['default']['NAME']}, DEBUG={settings.DEBUG}")
    print(f"Statements: {statement_mode()}")
    for note in CACHE_NOTE:
        print(note[0].upper() + note[1:])
    print(
        f"Records: {total:,} in the bench tenant ({layout.records:,} generated, {generation}), "
        f"{heads:,} fact keys, {layout.subjects:,} subjects, {layout.projects} projects; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(table_sizes())
    prepared = "prepared on the server" if settings.PREPARED_READS else "not prepared (DB_PREPARED_READS=0)"
    print(f"Database connections kept {settings.DATABASES['default']['CONN_MAX_AGE']} s; hot reads {prepared}")
    print(f"Benchmarks: {', '.join(args.benchmarks)}; VAR_DIR {settings.VAR_DIR} (removed at the end), ", end="")
    print(f"Celery broker {settings.CELERY_BROKER_URL}, queue {settings.CELERY_TASK_DEFAULT_QUEUE}")
    if run & {"api", "asof"}:
        print(f"Iterations: {args.iterations} timed after {warmup} warm-up per read benchmark")
    if "writes" in run:
        print(f"CAS writes: {args.writes // args.processes} in 1 process, then {args.writes} over {args.processes}")
    if "dashboard" in run:
        print(f"Pages: {args.page_iterations} timed requests after {page_warmup} warm-up per page")
    if run & {"claim", "rechecks"}:
        print(f"Rechecks: {args.due:,} records due", end="")
        print(
            f"; claim_due: {args.claim_runs} runs, then batches of {args.claim_batch:,}" if "claim" in run else "",
            end="",
        )
        print(
            f"; Celery: {args.rechecks:,} rechecks, {args.recheck_workers} processes ({args.celery_pool}), "
            f"queue {settings.CELERY_TASK_DEFAULT_QUEUE}-rechecks"
            if "rechecks" in run
            else ""
        )
    print("Running...", flush=True)

    figures: list[Figure] = []
    notes: list[str] = []
    if "api" in run:
        figures += bench_api(principal, tenant_id, args.iterations, warmup, args.seed)
    if "asof" in run:
        figures.append(bench_as_of(principal, tenant_id, args.iterations, warmup, args.seed))
    if "writes" in run:
        write_figures, write_notes = bench_writes(principal, tenant_id, args.writes, args.processes, warmup, args.seed)
        figures += write_figures
        notes += write_notes
    if "dashboard" in run:
        from bench.pages import bench_pages

        figures += bench_pages(TENANT, tenant_id, args.page_iterations, page_warmup, args.seed)
    if run & {"claim", "rechecks"}:
        from bench import rechecks

        due, note = rechecks.make_due(tenant_id, args.due, args.seed)
        notes.append(note)
        try:
            if "claim" in run:
                claim_figures, claim_notes = rechecks.bench_claim(due, args.claim_runs, args.claim_batch)
                figures += claim_figures
                notes += claim_notes
            if "rechecks" in run:
                rate_figures, rate_notes = rechecks.bench_recheck_rate(
                    tenant_id, due, args.rechecks, args.recheck_workers, args.celery_pool
                )
                figures += rate_figures
                notes += rate_notes
        finally:
            notes.append(rechecks.restore(tenant_id, due))
    from bench.rechecks import drop_side_effects

    notes.append(drop_side_effects())
    connection.close()

    print()
    print_table(figures)
    print()
    for note in notes:
        print(f"  {note}")
    print("Figures are printed, never asserted. Targets: list p95 <= 15 ms, as-of median <= 2 ms, ", end="")
    print(
        ">= 500 CAS writes/s on 2 cores; dashboard p95 <= 30 ms and >= 20x faster than the admin changelist; "
        "overview p95 <= 100 ms; ",
        end="",
    )
    print("claim_due of 100,000 due records <= 1 s.")
    for line in RATIOS:
        print(line)


if __name__ == "__main__":
    main()
