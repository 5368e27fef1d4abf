"""Benchmark of the derived stores: stale propagation, vector search and deletion of a subject.

Run (PostgreSQL only; the database is created if missing and migrated):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_stores .venv/bin/python bench/stores.py [--quick]

Before `django.setup()` the script sets, in os.environ: DEBUG=0, a placeholder SECRET_KEY if unset,
VECTOR_INDEX_PATH and BACKUP_DIR under a fresh temporary directory in var/bench-vectors/, the cache on
redis://127.0.0.1:6379/12 with a key prefix of its own, and Celery on redis://127.0.0.1:6379/11 with a
queue of its own. No Celery worker consumes that queue: tasks the product enqueues after commit
(embedding, regeneration, the deletion's `run_request`) are sent to it and deleted at the end; the
deletion's purge runs in this process with `purge_store.apply`.

1. `propagation`: one current record with N dependants (summaries via `create_summary`, scheduled
   actions via `schedule_action`, loaded contexts of agent sessions via `register_context_load`, cache
   entries via `caches.store`). Times `propagate([record])` alone in a transaction that is rolled back
   (cache keys refilled before each run), `assert_fact` superseding the record in a transaction that is
   rolled back, and then the real, committed supersession through `assert_fact` (after-commit work
   included), and checks every dependant was reached.
2. `search`: a LanceDB index at a temporary path filled with `VectorIndex.upsert` in batches of 5,000
   entries, one per MemoryRecord row of one tenant (the rows are COPYed into PostgreSQL, so the API
   path finds them). Times `VectorIndex.search` (project and tenant-wide) and the API-level
   `memory_admin.derived.search.search` on random queries.
3. `deletion`: one subject with records (fact keys x revisions), vector entries, summaries, cache keys
   and log lines, written with COPY; a backup is taken; `request_deletion` is timed (it sets
   `removed_from_reads_at`; the call and the moment its transaction commits, when reads stop returning
   the subject), then `purge_store.apply` is run for each store row in turn until `purge_confirmed_at` is
   set (the first also runs the find stage of the stores that find their targets when the purge starts).
   `--profile` prints a cProfile of the `request_deletion` call.

Timings are printed next to the issue's targets; nothing is asserted. `--quick` divides every data size
by 10. The machine's load average is printed first: other work on it shows in the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import math
import os
import pstats
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_ROOT = REPO_ROOT / "var" / "bench-vectors"
RUN_TAG = secrets.token_hex(3)  # tenants and subjects of this run are unique, so reruns never collide
CACHE_URL = "redis://127.0.0.1:6379/12"
BROKER_URL = "redis://127.0.0.1:6379/11"
BENCHMARKS = ("propagation", "search", "deletion", "vectors")
# `vectors`: bench/vectors.py (ANN index vs exact scan, no database) at this many vectors (--quick: / 10).
VECTOR_BENCH_SIZE = 250_000
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}

WORDS = (
    "contract renewal march april budget review meeting invoice overdue shipping delayed warehouse berlin paris "
    "london support ticket escalated premium plan annual discount approved pending signature legal counsel "
    "quarterly report forecast revenue churn risk onboarding training workshop kickoff deadline extended "
    "migration database backup security audit passed failed vendor supplier price increase decrease "
    "headcount hiring freeze office relocation remote policy laptop replacement license seats expansion "
    "pilot project phase two launch marketing campaign newsletter webinar feedback survey score nps "
    "priority customer account manager owner champion sponsor executive board approval travel visa"
).split()
PREDICATES = (
    "deadline",
    "owner",
    "status",
    "budget",
    "phone",
    "city",
    "plan",
    "renewal_date",
    "account_manager",
    "preferred_language",
    "billing_email",
    "contract_value",
    "risk_level",
    "next_meeting",
    "region",
    "segment",
    "support_tier",
    "nps_score",
    "last_order",
    "notes",
)


# --- configuration --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    # 1. propagation
    summaries: int = 300
    actions: int = 300
    contexts: int = 300
    cache_entries: int = 100
    agents: int = 30
    # 2. search
    vectors: int = 100_000
    search_projects: int = 4
    upsert_batch: int = 5_000
    # 3. deletion
    del_facts: int = 1_000
    del_revisions: int = 10
    del_summaries: int = 1_000
    del_cache_keys: int = 10_000
    del_events: int = 100_000
    del_background_records: int = 10_000

    def divided(self, by: int) -> Scale:
        keep = {"del_revisions", "search_projects", "upsert_batch"}
        return Scale(**{k: (v if k in keep else max(1, v // by)) for k, v in self.__dict__.items()})


@dataclass
class Row:
    """One line of the report. `samples_ms` empty → a single figure in `value` (seconds or a count)."""

    name: str
    samples_ms: list[float] = field(default_factory=list)
    target: str = ""
    target_ms: float | None = None  # compared with the median (single figures: the value in ms)
    single_ms: float | None = None
    count: int | None = None
    note: str = ""

    @property
    def n(self) -> int:
        return self.count if self.count is not None else len(self.samples_ms)

    @property
    def median(self) -> float:
        if self.samples_ms:
            return statistics.median(self.samples_ms)
        return self.single_ms if self.single_ms is not None else math.nan

    @property
    def p95(self) -> float:
        return percentile(self.samples_ms, 95) if self.samples_ms else math.nan

    @property
    def met(self) -> str:
        if self.target_ms is None or math.isnan(self.median):
            return ""
        worst = self.p95 if not math.isnan(self.p95) else self.median
        return "yes" if worst <= self.target_ms else "NO"


def percentile(samples: Sequence[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def fmt_ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:,.1f}" if value < 100_000 else f"{value:,.0f}"


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n== {title} ==")
    header = f"{'figure':<58} {'n':>6} {'median ms':>11} {'p95 ms':>10}  {'target':<18} {'met':<4} note"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.name:<58} {r.n:>6} {fmt_ms(r.median):>11} {fmt_ms(r.p95):>10}  {r.target:<18} {r.met:<4} {r.note}")
    print("  ('met' compares the p95, or the single value, with the target; it is printed, never asserted)")


def say(text: str) -> None:
    print(text, flush=True)


def check(label: str, ok: bool, detail: str = "") -> bool:
    say(f"  check {'ok ' if ok else 'FAILED'} {label}{f' ({detail})' if detail else ''}")
    return ok


# --- environment, database ------------------------------------------------------------------------


def configure_environment() -> tuple[Path, str]:
    """Everything the settings read, set before Django is imported; returns (work dir, unique name)."""
    if str(REPO_ROOT) not in sys.path:  # `python bench/stores.py` puts bench/ first, not the repository
        sys.path.insert(0, str(REPO_ROOT))
    url = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(
            "bench/stores.py needs PostgreSQL: set "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_stores"
        )
    if (parts.hostname or "127.0.0.1") not in LOCAL_HOSTS:
        sys.exit(f"Refusing DATABASE_URL host {parts.hostname!r}: the bench only talks to 127.0.0.1.")
    if "bench" not in parts.path:
        sys.exit(f"Refusing database {parts.path.lstrip('/')!r}: the bench writes only to a database named *bench*.")
    VECTORS_ROOT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"stores-{os.getpid()}-", dir=VECTORS_ROOT))
    unique = f"bench-stores-{os.getpid()}-{RUN_TAG}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "memory_admin.settings"
    os.environ["DEBUG"] = "0"  # DEBUG on would keep every query and skew the figures
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ["VECTOR_INDEX_PATH"] = str(workdir / "vectors")
    os.environ["BACKUP_DIR"] = str(workdir / "backups")
    os.environ["CACHE_URL"] = CACHE_URL
    os.environ["CACHE_KEY_PREFIX"] = unique
    os.environ["CELERY_BROKER_URL"] = BROKER_URL
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = unique
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"
    # Quieter output: Celery's per-task INFO lines, and lance's Rust-side deprecation WARN that
    # VectorIndex.search triggers on every query (it selects columns without `_distance`).
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("LANCEDB_LOG", "error")
    return workdir, unique


def admin_connection() -> Any:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or None,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        dbname="postgres",
        autocommit=True,
    )


def prepare_database(fresh: bool) -> None:
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections
    from psycopg import sql

    if connection.vendor != "postgresql":
        sys.exit(f"bench/stores.py needs PostgreSQL, but the database is {connection.vendor!r}.")
    name = str(settings.DATABASES["default"]["NAME"])
    connections.close_all()
    with admin_connection() as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None
        if exists and fresh:
            say(f"Dropping database {name} (--fresh)")
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            exists = False
        if not exists:
            say(f"Creating database {name}")
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        size = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM memory_memoryrecord")
        records = cursor.fetchone()[0]
    say(
        f"Database {name}: migrated in {time.perf_counter() - started:.1f} s; {size}, {records:,} records "
        f"already there (earlier runs' data stays; this run's tenants end in -{RUN_TAG})"
    )


def cleanup(workdir: Path, unique: str, keep_files: bool) -> None:
    """Delete this run's cache keys and broker queue from Redis, and the temporary directory."""
    import redis

    removed = {}
    for url, pattern in ((CACHE_URL, f"{unique}:*"), (BROKER_URL, f"*{unique}*")):
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
        removed[url] = len(keys)
        client.close()
    if keep_files:
        say(f"Kept {workdir} (--keep-files)")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    say(
        f"Cleanup: {removed[CACHE_URL]} cache keys (prefix {unique}) and {removed[BROKER_URL]} broker keys "
        f"(queue {unique}, never consumed) deleted from Redis; {'kept' if keep_files else 'removed'} {workdir}"
    )


# --- helpers --------------------------------------------------------------------------------------


class QueryLog:
    """A `connection.execute_wrapper`: the duration, SQL and parameter count of every query."""

    def __init__(self) -> None:
        self.entries: list[tuple[float, str, int]] = []

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.entries.append((time.perf_counter() - started, sql, len(params) if params else 0))

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def seconds(self) -> float:
        return sum(e[0] for e in self.entries)

    def slowest(self, n: int) -> list[tuple[float, str, int]]:
        return sorted(self.entries, key=lambda e: -e[0])[:n]

    def print_slowest(self, n: int, indent: str = "    ") -> None:
        for seconds, sql, params in self.slowest(n):
            text = " ".join(sql.split())
            say(f"{indent}{seconds * 1000:9.1f} ms  ({params:,} params)  {text[:170]}{'…' if len(text) > 170 else ''}")


@contextlib.contextmanager
def logged_queries() -> Iterator[QueryLog]:
    from django.db import connection

    log = QueryLog()
    with connection.execute_wrapper(log):
        yield log


def reserve_ids(model: Any, n: int) -> int:
    """The first of `n` consecutive ids taken from the model's sequence (nothing else writes here)."""
    from django.db import connection

    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [table])
        first = int(cursor.fetchone()[0])
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [table, first + n - 1])
    return first


def copy_rows(model: Any, rows: Sequence[dict[str, Any]]) -> int:
    """COPY `rows` (attname → value) into the model's table; missing fields get the model's default."""
    from django.db import connection
    from django.db.models import JSONField

    if not rows:
        return 0
    fields = [f for f in model._meta.concrete_fields if f.attname in rows[0] or not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    defaults = {f.attname: f.get_default() for f in fields}
    json_fields = {f.attname for f in fields if isinstance(f, JSONField)}
    connection.ensure_connection()
    with (
        connection.connection.cursor() as cur,
        cur.copy(f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            values = []
            for f in fields:
                value = row.get(f.attname, defaults[f.attname])
                if f.attname in json_fields and not (value is None and f.null):
                    value = json.dumps(value)
                values.append(value)
            copy.write_row(values)
    return len(rows)


def analyze(*models: Any) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for model in models:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def short_json(value: Any, limit: int = 230) -> str:
    def shrink(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: shrink(x) for k, x in v.items() if k != "samples"}
        if isinstance(v, list):
            return [shrink(x) for x in v[:2]] + ([f"…{len(v)} items"] if len(v) > 2 else [])
        if isinstance(v, str) and len(v) > 60:
            return v[:57] + "…"
        return v

    text = json.dumps(shrink(value), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_average() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


# --- 1. propagation -------------------------------------------------------------------------------


def bench_propagation(scale: Scale, iterations: int, warmup: int) -> list[Row]:
    from django.core.cache import cache
    from django.db import transaction
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.derived import caches
    from memory_admin.derived.lineage import BaseRef, create_summary, register_context_load, schedule_action
    from memory_admin.derived.models import (
        ActionBase,
        CacheEntry,
        ContextItem,
        Invalidation,
        Propagation,
        ScheduledAction,
        Summary,
        SummaryBase,
    )
    from memory_admin.derived.propagation import propagate
    from memory_admin.memory.actions import Assertion, assert_fact
    from memory_admin.memory.models import MemoryRecord

    say("\n# 1. Propagation for one record with many dependants")
    tenant = f"bench-prop-{RUN_TAG}"
    project = "proj-prop"
    writer = ensure_principal(tenant, "bench-writer", ["owner", "admin"])
    tenant_id: int = writer.tenant_id  # type: ignore[assignment]
    agents = [ensure_principal(tenant, f"bench-agent-{i:02d}", ["agent"]) for i in range(scale.agents)]
    rng = random.Random(1)
    now = timezone.now()
    started = time.perf_counter()
    hot_assertion = Assertion(
        project_id=project,
        subject_id="cust-hot",
        predicate="renewal_date",
        value="2026-03-01",
        valid_from=now - timedelta(days=30),
        source_canonical_ref="bench://crm/cust-hot",
        source_revision="1",
    )
    hot = assert_fact(writer, hot_assertion).record
    others = [
        assert_fact(
            writer,
            Assertion(
                project_id=project,
                subject_id=f"cust-{i:03d}",
                predicate=rng.choice(PREDICATES),
                value=words(rng, 3),
                valid_from=now - timedelta(days=10),
                source_canonical_ref=f"bench://crm/cust-{i:03d}",
                source_revision="1",
            ),
        ).record
        for i in range(20)
    ]
    hot_ref = BaseRef(hot.memory_id, hot.revision)

    def second_base() -> BaseRef:
        other = rng.choice(others)
        return BaseRef(other.memory_id, other.revision)

    summary_ids = [
        create_summary(
            writer,
            project_id=project,
            text=f"Renewal digest {i}: {words(rng, 8)}",
            kind="facts_digest",
            bases=[hot_ref, second_base()],
        ).pk
        for i in range(scale.summaries)
    ]
    action_ids = [
        schedule_action(
            agents[i % len(agents)],
            project_id=project,
            kind="send_reminder",
            payload={"to": f"owner-{i}", "text": words(rng, 5)},
            due_at=now + timedelta(days=7 + i % 30),
            bases=[hot_ref, second_base()],
        ).pk
        for i in range(scale.actions)
    ]
    load_ids = [
        register_context_load(
            agents[i % len(agents)],
            session_id=f"sess-{i % len(agents)}-{i // len(agents)}",
            bases=[hot_ref, second_base()],
            expires_at=now + timedelta(hours=8),
            project_id=project,
        ).pk
        for i in range(scale.contexts)
    ]
    keys = [caches.fact_key(tenant_id, project, hot.subject_id, hot.predicate)]
    keys += [caches.cache_key("answer", tenant_id, project, "renewals", i) for i in range(1, scale.cache_entries)]
    cached_value = {"memory_id": hot.memory_id, "value": hot.value, "text": words(rng, 10)}
    for i, key in enumerate(keys):
        caches.store(tenant_id, key, cached_value, [hot] if i % 2 else [hot, rng.choice(others)], ttl=3600)
    analyze(MemoryRecord, Summary, SummaryBase, ScheduledAction, ActionBase, ContextItem, CacheEntry, Propagation)
    dependants = len(summary_ids) + len(action_ids) + len(load_ids) + len(keys)
    say(
        f"Setup ({time.perf_counter() - started:.1f} s, untimed): record {hot.memory_id} (tenant {tenant}) with "
        f"{dependants:,} dependants: {len(summary_ids)} summaries (create_summary), {len(action_ids)} scheduled "
        f"actions (schedule_action), {len(load_ids)} loaded contexts of {len(agents)} agents (register_context_load), "
        f"{len(keys)} cache keys (caches.store, Redis); each summary/action/context also has a second base."
    )

    def refill_cache() -> None:
        cache.set_many(dict.fromkeys(keys, cached_value), timeout=3600)

    expected = (len(summary_ids), len(action_ids), len(load_ids), len(keys))
    say(
        f"Measuring propagate([record]) in a transaction rolled back each time ({warmup} warm-up + {iterations} "
        "timed; the cache keys are refilled first because propagate deletes them from Redis at once)..."
    )
    propagate_ms: list[float] = []
    propagate_queries: list[int] = []
    wrong = 0
    for i in range(warmup + iterations):
        refill_cache()
        with transaction.atomic():
            record = MemoryRecord.objects.get(pk=hot.pk)
            with logged_queries() as log:
                t0 = time.perf_counter()
                result = propagate([record], reason="bench: rolled back", now=timezone.now())
                elapsed = (time.perf_counter() - t0) * 1000
            transaction.set_rollback(True)
        got = (len(result.summaries), len(result.actions), result.notices, len(result.cache_keys))
        wrong += got != expected
        if i >= warmup:
            propagate_ms.append(elapsed)
            propagate_queries.append(log.count)
    say("  slowest queries of the last propagate():")
    log.print_slowest(4)

    say(f"Measuring assert_fact superseding the record, rolled back ({warmup} warm-up + {iterations} timed)...")
    assert_ms: list[float] = []
    for i in range(warmup + iterations):
        refill_cache()
        with transaction.atomic():
            t0 = time.perf_counter()
            res = assert_fact(
                writer,
                replace(
                    hot_assertion,
                    value=f"2026-04-{1 + i % 28:02d}",
                    source_revision="2",
                    expected_revision=1,
                    valid_from=timezone.now() - timedelta(seconds=1),
                ),
            )
            elapsed = (time.perf_counter() - t0) * 1000
            wrong += res.outcome != "created"
            transaction.set_rollback(True)
        if i >= warmup:
            assert_ms.append(elapsed)

    say("Measuring the real supersession: assert_fact(expected_revision=1), committed, after-commit work included...")
    refill_cache()
    with logged_queries() as log:
        t0 = time.perf_counter()
        res = assert_fact(
            writer,
            replace(
                hot_assertion,
                value="2026-04-15",
                source_revision="2",
                expected_revision=1,
                valid_from=timezone.now() - timedelta(seconds=1),
            ),
        )
        real_ms = (time.perf_counter() - t0) * 1000
    say(f"  {log.count} queries, {log.seconds * 1000:.1f} ms in SQL; slowest:")
    log.print_slowest(4)
    new = res.record
    old = MemoryRecord.objects.get(pk=hot.pk)
    check(
        "the record is superseded by the new revision",
        old.status == "superseded" and old.superseded_by_id == new.pk,
        f"{old.status}, superseded_by={old.superseded_by_id}, new={new.memory_id} r{new.revision}",
    )
    stale = Summary.objects.filter(pk__in=summary_ids, status=Summary.Status.STALE).count()
    check(f"{len(summary_ids)} summaries stale", stale == len(summary_ids), f"{stale}")
    suspended = ScheduledAction.objects.filter(pk__in=action_ids, status=ScheduledAction.Status.SUSPENDED).count()
    check(f"{len(action_ids)} actions suspended", suspended == len(action_ids), f"{suspended}")
    notices = Invalidation.objects.filter(record_id=hot.pk, load_id__in=load_ids, successor_id=new.pk).count()
    check(f"{len(load_ids)} invalidation notices (successor = new record)", notices == len(load_ids), f"{notices}")
    present = cache.get_many(keys)
    evicted = CacheEntry.objects.filter(key__in=keys, evicted_at__isnull=False).count()
    check(
        f"{len(keys)} cache keys gone from Redis and their manifests evicted",
        not present and evicted == len(keys),
        f"{len(present)} still in Redis, {evicted} manifests evicted",
    )
    logged = Propagation.objects.filter(record_id=hot.pk, reason__startswith="Superseded").count()
    check("one Propagation row per dependant (+1 vector)", logged == dependants + 1, f"{logged}")
    check("every rolled-back run reached every dependant", wrong == 0, f"{wrong} runs differed")

    target = "≤ 1,000 ms"
    return [
        Row(
            f"propagate() alone, {dependants:,} dependants (rolled back)",
            propagate_ms,
            target,
            1000.0,
            note=f"{statistics.median(propagate_queries):.0f} queries",
        ),
        Row("assert_fact supersession (rolled back, no commit)", assert_ms, target, 1000.0),
        Row(
            "assert_fact supersession, committed (once)",
            target=target,
            target_ms=1000.0,
            single_ms=real_ms,
            count=1,
            note=f"{log.count} queries, {log.seconds * 1000:.0f} ms SQL, incl. commit + after-commit enqueues",
        ),
    ]


# --- 2. search ------------------------------------------------------------------------------------


def bench_search(scale: Scale, queries: int, warmup: int) -> list[Row]:
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.derived import search as api_search
    from memory_admin.derived.tasks import record_text
    from memory_admin.derived.vectors import VectorEntry, VectorIndex, get_index
    from memory_admin.memory.models import MemoryRecord, Project, new_public_id

    say("\n# 2. Vector search over one tenant's entries")
    tenant = f"bench-search-{RUN_TAG}"
    agent = ensure_principal(tenant, "bench-agent", ["agent"])
    tenant_id: int = agent.tenant_id  # type: ignore[assignment]
    rng = random.Random(2)
    started = time.perf_counter()
    projects = [
        Project.objects.get_or_create(tenant_id=tenant_id, key=f"proj-{p}")[0] for p in range(scale.search_projects)
    ]
    # Fact keys: subjects x PREDICATES; one fact in nine has a superseded first revision.
    n_facts = math.ceil(scale.vectors / 1.125)
    history = scale.vectors - n_facts
    subjects = math.ceil(n_facts / len(PREDICATES))
    first_id = reserve_ids(MemoryRecord, scale.vectors)
    now = timezone.now()
    rows: list[dict[str, Any]] = []
    entries: list[VectorEntry] = []
    next_id = first_id
    for f in range(n_facts):
        s, predicate = divmod(f, len(PREDICATES))
        subject = f"cust-{s:05d}"
        project = projects[s % len(projects)]
        chain = 2 if f < history else 1
        first_valid = now - timedelta(days=400 - rng.randrange(300))
        for j in range(chain):
            head = j == chain - 1
            valid_from = first_valid + timedelta(days=30 * j)
            rid = next_id + j
            row = {
                "id": rid,
                "tenant_id": tenant_id,
                "project_id": project.pk,
                "memory_id": new_public_id("mem"),
                "subject_id": subject,
                "predicate": PREDICATES[predicate],
                "value": words(rng, rng.randint(3, 8)),
                "status": "accepted" if head else "superseded",
                "valid_from": valid_from,
                "valid_to": None if head else valid_from + timedelta(days=30),
                "valid_to_recorded_at": None if head else valid_from + timedelta(days=30),
                "recorded_from": valid_from,
                "recorded_to": None if head else valid_from + timedelta(days=30),
                "revision": j + 1,
                "source_canonical_ref": f"bench://crm/{subject}",
                "source_revision": str(j + 1),
                "issuer_id": agent.pk,
                "entered_current": True,
                "is_head": head,
                "superseded_by_id": None if head else rid + 1,
            }
            rows.append(row)
            record = MemoryRecord(subject_id=subject, predicate=PREDICATES[predicate], value=row["value"])
            entries.append(
                VectorEntry(
                    entry_id=f"record:{row['memory_id']}",
                    tenant_id=tenant_id,
                    project_id=project.key,
                    kind="record",
                    object_id=str(row["memory_id"]),
                    revision=j + 1,
                    text=record_text(record),
                    usable=head,
                )
            )
        next_id += chain
    with transaction.atomic():
        copy_rows(MemoryRecord, rows)
    analyze(MemoryRecord)
    say(
        f"Setup: {len(rows):,} MemoryRecord rows COPYed for tenant {tenant} ({subjects:,} subjects x "
        f"{len(PREDICATES)} predicates in {len(projects)} projects; {history:,} facts have a superseded revision 1) "
        f"in {time.perf_counter() - started:.1f} s. Entry text = record_text(): '{entries[0].text}'"
    )

    index_path = Path(settings.VECTOR_INDEX_PATH)
    index = get_index()
    say(
        f"Loading {len(entries):,} VectorEntry rows into a new LanceDB index at {index_path} with "
        f"VectorIndex.upsert in batches of {scale.upsert_batch:,} ({index.embedder.name})..."
    )
    batch_s: list[float] = []
    embed_s = 0.0
    load_started = time.perf_counter()
    for start in range(0, len(entries), scale.upsert_batch):
        batch = entries[start : start + scale.upsert_batch]
        t0 = time.perf_counter()
        index.upsert(batch)
        batch_s.append(time.perf_counter() - t0)
    load_s = time.perf_counter() - load_started
    t0 = time.perf_counter()
    index.embedder.embed([e.text for e in entries[: scale.upsert_batch]])
    embed_s = (time.perf_counter() - t0) * len(batch_s)  # embedding alone, extrapolated from one batch
    disk = sum(p.stat().st_size for p in index_path.rglob("*") if p.is_file())
    say(
        f"  loaded in {load_s:.1f} s ({len(entries) / load_s:,.0f} entries/s); per batch: first "
        f"{batch_s[0]:.2f} s, median {statistics.median(batch_s):.2f} s, last {batch_s[-1]:.2f} s; of which "
        f"HashingEmbedder ≈ {embed_s:.1f} s in all; {index.versions()} table versions, {disk / 1e6:.0f} MB on disk"
    )
    table = index._open_table()
    indices = table.list_indices()
    say(f"  LanceDB indices on the table: {indices or 'none'} → every search is an exact (flat) scan, no ANN index")
    query_vector = index.embedder.embed(["cust-00001 deadline"])[0]
    plan = (
        table.search(query_vector, vector_column_name="vector")
        .distance_type("cosine")
        .where(f"tenant_id = {tenant_id} AND project_id = 'proj-0' AND usable = true", prefilter=True)
        .limit(10)
        .explain_plan(verbose=False)
    )
    say("  plan of a project-filtered search (explain_plan):")
    for line in str(plan).strip().splitlines()[:12]:
        say(f"    {line.strip()[:150]}")

    def random_query() -> str:
        if rng.random() < 0.5:
            return f"cust-{rng.randrange(subjects):05d} {rng.choice(PREDICATES)}"
        return words(rng, rng.randint(2, 4))

    texts = [random_query() for _ in range(queries + warmup)]
    project_keys = [rng.choice(projects).key for _ in texts]
    shared = VectorIndex(index_path)  # a second handle, as another process would have it
    hits_seen: list[int] = []

    def index_project(i: int) -> None:
        hits_seen.append(len(shared.search(tenant_id=tenant_id, project_id=project_keys[i], text=texts[i], k=10)))

    def index_tenant(i: int) -> None:
        hits_seen.append(len(shared.search(tenant_id=tenant_id, project_id=None, text=texts[i], k=10)))

    api_usable: list[int] = []

    def api(i: int) -> None:
        result = api_search.search(agent, project_id=project_keys[i], q=texts[i], k=10)
        api_usable.append(len(result.results))

    def run(fn: Callable[[int], None]) -> list[float]:
        samples = []
        for i in range(warmup + queries):
            t0 = time.perf_counter()
            fn(i)
            if i >= warmup:
                samples.append((time.perf_counter() - t0) * 1000)
        return samples

    say(f"Timing {queries} random queries (+{warmup} warm-up) each way: half 'cust-NNNNN <predicate>', half 2-4 words.")
    project_ms = run(index_project)
    tenant_ms = run(index_tenant)
    with logged_queries() as log:
        api_ms = run(api)
    per_project = len(entries) // len(projects)
    return [
        Row(
            f"index load: upsert {len(entries):,} entries, batches of {scale.upsert_batch:,}",
            count=len(batch_s),
            single_ms=load_s * 1000,
            note=f"{len(entries) / load_s:,.0f} entries/s; batch first {batch_s[0]:.2f} s, last {batch_s[-1]:.2f} s",
        ),
        Row(
            f"VectorIndex.search k=10, project (~{per_project:,} rows)",
            project_ms,
            note=f"exact scan; {statistics.mean(hits_seen[: warmup + queries]):.1f} hits/query",
        ),
        Row(f"VectorIndex.search k=10, whole tenant ({len(entries):,} rows)", tenant_ms, note="exact scan"),
        Row(
            "derived.search.search(principal, project, k=10), API",
            api_ms,
            note=f"index k=40 + DB check; {log.count / (warmup + queries):.1f} queries/call, "
            f"{log.seconds * 1000 / (warmup + queries):.1f} ms SQL/call; {statistics.mean(api_usable):.1f} usable hits",
        ),
    ]


# --- 3. deletion ----------------------------------------------------------------------------------


@dataclass
class DeletionFixture:
    tenant_id: int
    project_key: str
    subject: str
    compliance: Any
    record_ids: list[int]
    memory_ids: list[str]
    cache_keys: list[str]
    subject_events: int
    vector_rows: int


def build_deletion_fixture(scale: Scale) -> DeletionFixture:
    from django.core.cache import cache
    from django.db import transaction
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.derived.models import CacheEntry, Event, EventSubject, Summary, SummaryBase, subject_tags
    from memory_admin.derived.tasks import record_text
    from memory_admin.derived.vectors import VectorEntry, get_index
    from memory_admin.memory.models import AuditEvent, MemoryRecord, Project, new_public_id

    tenant = f"bench-del-{RUN_TAG}"
    writer = ensure_principal(tenant, "bench-writer", ["owner", "admin"])
    compliance = ensure_principal(tenant, "bench-compliance", ["compliance"])
    tenant_id: int = writer.tenant_id  # type: ignore[assignment]
    project = Project.objects.get_or_create(tenant_id=tenant_id, key="proj-del")[0]
    subject = f"person-{RUN_TAG}"
    rng = random.Random(3)
    now = timezone.now()
    started = time.perf_counter()

    # Log lines: 10% about the subject, the rest about other subjects of the same project; each with its
    # EventSubject rows (what Event.save writes; COPY bypasses it).
    events: list[dict[str, Any]] = []
    event_subjects: list[dict[str, Any]] = []
    subject_events: list[str] = []
    first_event = reserve_ids(Event, scale.del_events)
    for i in range(scale.del_events):
        about = i % 10 == 0
        who = subject if about else f"other-{rng.randrange(max(1, scale.del_background_records // 10)):05d}"
        public_id = new_public_id("evt")
        if about:
            subject_events.append(public_id)
        tags = [who] if rng.random() < 0.9 else [who, f"other-{rng.randrange(1000):05d}"]
        events.append(
            {
                "id": first_event + i,
                "public_id": public_id,
                "tenant_id": tenant_id,
                "project_id": project.pk,
                "session_id": f"sess-{rng.randrange(2000)}",
                "actor": rng.choice(("user", "agent")),
                "text": f"{who} said: {words(rng, rng.randint(6, 14))}",
                "occurred_at": now - timedelta(minutes=i),
                "subject_ids": tags,
                "recorded_at": now - timedelta(minutes=i),
            }
        )
        event_subjects += [
            {"event_id": first_event + i, "tenant_id": tenant_id, "project_id": project.pk, "subject_id": tag}
            for tag in subject_tags(tags)
        ]

    # Records: the subject's fact keys x revisions (only the last revision current), and background facts.
    n_subject = scale.del_facts * scale.del_revisions
    first_id = reserve_ids(MemoryRecord, n_subject + scale.del_background_records)
    records: list[dict[str, Any]] = []
    heads: list[dict[str, Any]] = []
    rid = first_id
    for f in range(scale.del_facts):
        predicate = f"{PREDICATES[f % len(PREDICATES)]}_{f // len(PREDICATES):03d}"
        first_valid = now - timedelta(days=400)
        for j in range(scale.del_revisions):
            head = j == scale.del_revisions - 1
            valid_from = first_valid + timedelta(days=j)
            cut = None if head else valid_from + timedelta(days=1)
            row = {
                "id": rid,
                "tenant_id": tenant_id,
                "project_id": project.pk,
                "memory_id": new_public_id("mem"),
                "subject_id": subject,
                "predicate": predicate,
                "value": words(rng, rng.randint(2, 6)),
                "status": "accepted" if head else "superseded",
                "valid_from": valid_from,
                "valid_to": cut,
                "valid_to_recorded_at": cut,
                "recorded_from": valid_from,
                "recorded_to": cut,
                "revision": j + 1,
                "source_canonical_ref": f"bench://crm/{subject}",
                "source_revision": str(j + 1),
                "issuer_id": writer.pk,
                "entered_current": True,
                "is_head": head,
                "superseded_by_id": None if head else rid + 1,
                "source_event_ids": [rng.choice(subject_events)] if subject_events else [],
            }
            records.append(row)
            if head:
                heads.append(row)
            rid += 1
    background: list[dict[str, Any]] = []
    for b in range(scale.del_background_records):
        who = f"other-{b // 10:05d}"
        background.append(
            {
                "id": rid,
                "tenant_id": tenant_id,
                "project_id": project.pk,
                "memory_id": new_public_id("mem"),
                "subject_id": who,
                "predicate": PREDICATES[b % 10],
                "value": words(rng, 4),
                "status": "accepted",
                "valid_from": now - timedelta(days=100),
                "recorded_from": now - timedelta(days=100),
                "revision": 1,
                "source_canonical_ref": f"bench://crm/{who}",
                "source_revision": "1",
                "issuer_id": writer.pk,
                "entered_current": True,
                "is_head": True,
            }
        )
        rid += 1
    audits = [
        {
            "tenant_id": tenant_id,
            "at": r["recorded_from"],
            "actor_id": writer.pk,
            "actor_name": writer.name,
            "action": "record.asserted.created",
            "object_type": "record",
            "object_id": r["memory_id"],
            "before": None,
            "after": {"value": r["value"], "revision": r["revision"], "status": "accepted"},
            "reason": "",
        }
        for r in records + background
    ]

    # Summaries: each on 3 of the subject's records; one in ten also on a background head, and of a kind
    # with a regenerator, so the purge rebuilds it from that remaining base.
    first_summary = reserve_ids(Summary, scale.del_summaries)
    summaries: list[dict[str, Any]] = []
    bases: list[dict[str, Any]] = []
    summary_public: list[str] = []
    for s in range(scale.del_summaries):
        chosen = rng.sample(records, 3)
        regenerable = s % 10 == 0 and background
        if regenerable:
            chosen.append(rng.choice(background))
        public_id = new_public_id("sum")
        summary_public.append(public_id)
        summaries.append(
            {
                "id": first_summary + s,
                "public_id": public_id,
                "tenant_id": tenant_id,
                "project_id": project.pk,
                "kind": "facts_digest" if regenerable else "text",
                "text": f"About {subject}: {words(rng, 20)}",
                "derived_from": [{"memory_id": r["memory_id"], "revision": r["revision"]} for r in chosen],
                "status": "current" if all(r["is_head"] for r in chosen) else "stale",
                "created_by_id": writer.pk,
                "created_at": now,
                "status_changed_at": now,
            }
        )
        bases += [{"summary_id": first_summary + s, "record_id": r["id"], "revision": r["revision"]} for r in chosen]

    # Cache keys: every fact key of the subject, then answers built on 1-3 of its records.
    first_entry = reserve_ids(CacheEntry, scale.del_cache_keys)
    entries: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    keys: list[str] = []
    for c in range(scale.del_cache_keys):
        if c < len(heads):
            fact_head = heads[c]
            key = f"fact:{tenant_id}:{project.key}:{subject}:{fact_head['predicate']}"[:250]
            on = [fact_head]
        else:
            key = f"answer:{tenant_id}:{project.key}:{subject}:q{c}"
            on = rng.sample(records, rng.randint(1, 3))
        keys.append(key)
        entries.append({"id": first_entry + c, "tenant_id": tenant_id, "key": key, "kind": "answer", "created_at": now})
        links += [{"cacheentry_id": first_entry + c, "memoryrecord_id": r["id"]} for r in on]

    with transaction.atomic():
        copy_rows(Event, events)
        copy_rows(EventSubject, event_subjects)
        copy_rows(MemoryRecord, records + background)
        copy_rows(AuditEvent, audits)
        copy_rows(Summary, summaries)
        copy_rows(SummaryBase, bases)
        copy_rows(CacheEntry, entries)
        copy_rows(CacheEntry.records.through, links)
    db_s = time.perf_counter() - started
    for start in range(0, len(keys), 1000):
        cache.set_many({k: {"subject": subject, "answer": words(rng, 6)} for k in keys[start : start + 1000]}, 3600)
    analyze(Event, EventSubject, MemoryRecord, AuditEvent, Summary, SummaryBase, CacheEntry, CacheEntry.records.through)

    t0 = time.perf_counter()
    index = get_index()
    vectors = [
        VectorEntry(
            entry_id=f"record:{r['memory_id']}",
            tenant_id=tenant_id,
            project_id=project.key,
            kind="record",
            object_id=r["memory_id"],
            revision=r["revision"],
            text=record_text(MemoryRecord(subject_id=r["subject_id"], predicate=r["predicate"], value=r["value"])),
            usable=r["is_head"],
        )
        for r in records + background
    ] + [
        VectorEntry(
            entry_id=f"summary:{s['public_id']}",
            tenant_id=tenant_id,
            project_id=project.key,
            kind="summary",
            object_id=s["public_id"],
            revision=1,
            text=s["text"],
            usable=s["status"] == "current",
        )
        for s in summaries
    ]
    for start in range(0, len(vectors), 5000):
        index.upsert(vectors[start : start + 5000])
    vector_s = time.perf_counter() - t0
    say(
        f"Setup (untimed): subject {subject!r} in {tenant}/{project.key}: {len(records):,} records "
        f"({scale.del_facts:,} fact keys x {scale.del_revisions} revisions, heads accepted, the rest superseded, "
        f"each naming one source event) + {len(background):,} background records of other subjects; "
        f"{len(audits):,} audit events (one per record); {len(summaries):,} summaries on 3 subject records each "
        f"({sum(1 for s in summaries if s['kind'] == 'facts_digest')} also on a background record, regenerable), "
        f"{len(bases):,} SummaryBase rows; {len(entries):,} cache keys (CacheEntry + {len(links):,} links, and set in "
        f"Redis); {len(events):,} log lines ({len(subject_events):,} about the subject) — COPY in {db_s:.1f} s. "
        f"Vector index: {len(vectors):,} entries (subject records, background records, summaries) upserted in "
        f"{vector_s:.1f} s."
    )
    return DeletionFixture(
        tenant_id=tenant_id,
        project_key=project.key,
        subject=subject,
        compliance=compliance,
        record_ids=[r["id"] for r in records],
        memory_ids=[r["memory_id"] for r in records],
        cache_keys=keys,
        subject_events=len(subject_events),
        vector_rows=len(vectors),
    )


@contextlib.contextmanager
def instrumented_stores(times: dict[str, float]) -> Iterator[None]:
    """Time each store adapter's find/hide_scope/hide/purge/verify, the deletion's propagation and its
    purge's find stage (`find_pending`), in this process only."""
    from deletion import service, stores, tasks

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[key] = times.get(key, 0.0) + time.perf_counter() - t0

        return wrapper

    patched: list[tuple[Any, str]] = []
    for name, store in stores.registered().items():
        for method in ("find", "hide_scope", "hide", "purge", "verify"):
            setattr(store, method, timed(f"{name}.{method}", getattr(store, method)))
            patched.append((store, method))
    originals: list[tuple[Any, str, Callable[..., Any]]] = [
        (service, "propagate_set", service.propagate_set),
        (tasks, "find_pending", service.find_pending),  # the name deletion.tasks imported from the service
    ]
    for module, name, original in originals:
        setattr(module, name, timed(name, original))
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)
        for store, method in patched:
            delattr(store, method)  # the class's method shows through again


def bench_deletion(scale: Scale, explain: bool, profile: bool = False) -> list[Row]:
    from django.core.cache import cache
    from django.db import transaction
    from django.db.models import Count
    from django.utils import timezone

    from deletion import ledger
    from deletion.backups import take_backup
    from deletion.models import DeletionRequest, StoreProgress, Tombstone
    from deletion.service import request_deletion
    from deletion.stores import Scope
    from deletion.stores.logs import LogsStore
    from deletion.stores.summaries import built_on
    from deletion.tasks import purge_store, run_request
    from memory_admin.derived.models import Event, Summary
    from memory_admin.derived.vectors import get_index
    from memory_admin.memory.models import MemoryRecord, RecordHide

    say("\n# 3. Deletion of a subject")
    fx = build_deletion_fixture(scale)
    t0 = time.perf_counter()
    backup = take_backup(retention_days=30)
    say(
        f"Backup taken first (untimed): {backup.method}, {backup.size_bytes / 1e6:.1f} MB in "
        f"{time.perf_counter() - t0:.1f} s, expires {backup.expires_at:%Y-%m-%d}"
    )

    if explain:
        project_id = MemoryRecord.all_objects.get(pk=fx.record_ids[0]).project_id
        event_ids = sorted(
            {
                e
                for ids in MemoryRecord.all_objects.filter(pk__in=fx.record_ids).values_list(
                    "source_event_ids", flat=True
                )
                for e in ids
            }
        )
        for label, qs in (
            (
                "logs.find: LogsStore._matching",
                LogsStore()._matching(fx.tenant_id, project_id, [fx.subject], event_ids),
            ),
            (
                "summaries.find: summaries.built_on",
                built_on(
                    Scope(fx.tenant_id, project_id, "", list(MemoryRecord.all_objects.filter(pk__in=fx.record_ids)))
                ),
            ),
        ):
            t0 = time.perf_counter()
            plan = qs.explain(analyze=True, buffers=True)
            say(
                f"EXPLAIN (ANALYZE, BUFFERS) of {label} (untimed, before the request; {time.perf_counter() - t0:.1f} s):"
            )
            for line in plan.splitlines():
                if len(line) > 400:  # the filter lists every memory id
                    line = line[:200] + f" …[{len(line):,} chars]… " + line[-80:]
                say(f"    {line}")

    times: dict[str, float] = {}
    say(
        "Timing request_deletion(compliance, scope={'subject_id': …}, dry_run=False): stages 1 and 2 in one "
        "transaction (tombstones, notices and cache evictions, every store's set-based hide_scope; find and hide "
        "only for a store that hides by its targets)..."
    )
    # The broker connection is opened before the timed call, as in a web process that has sent a task
    # before: the message goes to this run's queue, which no worker consumes (and it finds no request).
    t0 = time.perf_counter()
    run_request.delay(0)
    say(f"  broker connection warmed (untimed): {time.perf_counter() - t0:.2f} s")
    profiler = cProfile.Profile() if profile else None
    committed: list[float] = []
    original_append = ledger.append_entries_after_commit

    def append_marking_commit(entries: Any) -> None:
        # The acceptance's first after-commit callback: the moment reads stop returning the scope.
        transaction.on_commit(lambda: committed.append(time.perf_counter()))
        original_append(entries)

    ledger.append_entries_after_commit = append_marking_commit
    with instrumented_stores(times), logged_queries() as log:
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        request = request_deletion(
            fx.compliance,
            project_id=fx.project_key,
            scope={"subject_id": fx.subject},
            reason="bench: erasure request",
            dry_run=False,
        )
        if profiler is not None:
            profiler.disable()
        request_s = time.perf_counter() - t0
        committed_at = timezone.now()
    ledger.append_entries_after_commit = original_append
    commit_s = (committed[0] - t0) if committed else math.nan
    assert isinstance(request, DeletionRequest)
    request.refresh_from_db()
    stamp_lag = (
        (committed_at - request.removed_from_reads_at).total_seconds() if request.removed_from_reads_at else math.nan
    )
    say(
        f"  request {request.public_id}: state {request.state}; {log.count:,} queries, {log.seconds:.2f} s of "
        f"{request_s:.2f} s in SQL; removed_from_reads_at is stamped {stamp_lag:.2f} s before the call returned "
        "(taken as _accept ends; then the commit and the after-commit work: ledger, cache keys, enqueueing)"
    )
    say(
        "  time per step inside the call: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(times.items(), key=lambda kv: -kv[1]) if v >= 0.005)
    )
    say("  slowest queries:")
    log.print_slowest(6)
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)
        say("  cProfile of the call (--profile), by cumulative time, then by own time:\n" + out.getvalue())
    live = MemoryRecord.objects.filter(tenant_id=fx.tenant_id, subject_id=fx.subject).count()
    check("no record of the subject is readable (live manager)", live == 0, f"{live}")
    rules = RecordHide.objects.filter(tenant_id=fx.tenant_id).count()
    removed = MemoryRecord.all_objects.filter(tenant_id=fx.tenant_id, subject_id=fx.subject).removed().count()
    check(
        "the subject's records are hidden by one rule (RecordHide), their rows left for the purge",
        rules == 1 and removed == len(fx.record_ids),
        f"{rules} rule(s), {removed:,} records removed from reads",
    )
    stones = dict(
        Tombstone.objects.filter(tenant_id=fx.tenant_id).values_list("kind").annotate(n=Count("id")).order_by()
    )
    check(
        "acceptance wrote the subject's tombstone alone; the records' wait for the purge (the rule stands for them)",
        stones == {"subject": 1},
        f"{stones}",
    )
    hidden_events = Event.objects.filter(tenant_id=fx.tenant_id).removed().count()  # row by row or by a rule
    check("the subject's log lines are hidden", hidden_events >= fx.subject_events, f"{hidden_events:,} hidden")
    withdrawn = Summary.objects.filter(tenant_id=fx.tenant_id, hidden_at__isnull=False).count()
    check(f"the {scale.del_summaries:,} summaries are hidden", withdrawn == scale.del_summaries, f"{withdrawn:,}")
    left = cache.get_many(fx.cache_keys[:1000])
    check("the first 1,000 cache keys are evicted at once (caches.hide_scope)", not left, f"{len(left)} still in Redis")

    say(
        "Purging: purge_store.apply(args=[id]) for each StoreProgress row in turn, in this process (no worker); "
        "the first finds the targets of every store that waited for the purge (find_pending)..."
    )
    per_store: dict[str, tuple[float, QueryLog, str]] = {}
    times.clear()
    purge_started = time.perf_counter()
    with instrumented_stores(times):
        for progress in request.stores.order_by("id"):
            with logged_queries() as plog:
                t0 = time.perf_counter()
                result = purge_store.apply(args=[progress.pk])
                elapsed = time.perf_counter() - t0
            per_store[progress.store] = (elapsed, plog, f"{result.state}: {result.result}")
    purge_s = time.perf_counter() - purge_started
    say(
        f"  find stage (find_pending, in the first purge_store): {times.get('find_pending', 0):.2f} s: "
        + ", ".join(
            f"{k} {v:.2f} s"
            for k, v in sorted(times.items(), key=lambda kv: -kv[1])
            if k.endswith(".find") and v >= 0.005
        )
    )
    request.refresh_from_db()
    to_confirmed = (
        (request.purge_confirmed_at - request.accepted_at).total_seconds() if request.purge_confirmed_at else math.nan
    )
    say(
        f"  state {request.state}; purge_confirmed_at {request.purge_confirmed_at}; backups_expire_at "
        f"{request.backups_expire_at} ({request.backups_note})"
    )
    say(
        f"  {'store':<11} {'state':<9} {'found':>7} {'hidden':>7} {'purged':>7} {'remain':>6} {'tries':>5} "
        f"{'apply s':>8} {'purge s':>8} {'verify s':>8} {'SQL s':>6} {'queries':>7}  evidence"
    )
    rows = list(StoreProgress.objects.filter(request=request).order_by("id"))
    for p in rows:
        elapsed, plog, _ = per_store.get(p.store, (math.nan, QueryLog(), ""))
        say(
            f"  {p.store:<11} {p.state:<9} {p.found:>7,} {p.hidden:>7,} {p.purged:>7,} {p.remaining if p.remaining is not None else '-':>6} "
            f"{p.attempts:>5} {elapsed:>8.2f} {times.get(f'{p.store}.purge', 0):>8.2f} {times.get(f'{p.store}.verify', 0):>8.2f} "
            f"{plog.seconds:>6.2f} {plog.count:>7,}  {short_json(p.evidence)}"
        )
        if p.last_error:
            say(f"    last_error: {p.last_error[:300]}")
    slowest_store = max(per_store.items(), key=lambda kv: kv[1][0])
    say(f"  slowest queries of the slowest store ({slowest_store[0]}):")
    slowest_store[1][1].print_slowest(4)
    failed = [f"{name}: {outcome}" for name, (_, _, outcome) in per_store.items() if not outcome.startswith("SUCCESS")]
    check("every purge_store.apply succeeded", not failed, "; ".join(failed))
    check("purge_confirmed_at is set", request.purge_confirmed_at is not None)
    check("backups_expire_at is set (the backup taken first)", request.backups_expire_at is not None)
    index = get_index()
    remaining_vectors = len(index.find(tenant_id=fx.tenant_id, object_ids=fx.memory_ids))
    check(
        "no vector entry of the subject's records left",
        remaining_vectors == 0,
        f"{remaining_vectors}; index now {index.count(tenant_id=fx.tenant_id):,} rows, {index.versions()} version(s)",
    )
    left = cache.get_many(fx.cache_keys)
    check(f"none of the {len(fx.cache_keys):,} cache keys in Redis", not left, f"{len(left)} present")

    critical = max(elapsed for elapsed, _, _ in per_store.values())
    purge_sql_s = sum(plog.seconds for _, plog, _ in per_store.values())
    return [
        Row(
            "request_deletion → removed_from_reads (call wall time)",
            target="≤ 1,000 ms",
            target_ms=1000.0,
            single_ms=request_s * 1000,
            count=1,
            note=f"{log.count:,} queries, {log.seconds:.1f} s in SQL: the call is {request_s / log.seconds:.1f}x its SQL",
        ),
        Row(
            "request_deletion → acceptance committed (reads exclude it)",
            target="≤ 1,000 ms",
            target_ms=1000.0,
            single_ms=commit_s * 1000,
            count=1,
            note="the rest of the call is after-commit work: ledger lines, cache keys again, enqueueing",
        ),
        Row(
            "purge of all stores, sequential purge_store.apply",
            single_ms=purge_s * 1000,
            count=len(rows),
            note=f"slowest store {slowest_store[0]} {slowest_store[1][0]:.1f} s (a lower bound with parallel workers: {critical:.1f} s); "
            f"{purge_s / purge_sql_s:.1f}x its SQL ({purge_sql_s:.1f} s)",
        ),
        Row(
            "request accepted → purge_confirmed_at (DB timestamps)",
            target="≤ 30,000 ms",
            target_ms=30_000.0,
            single_ms=to_confirmed * 1000,
            count=1,
            note="accepted_at: when the request row is created, inside the call",
        ),
        Row(
            "request_deletion start → last store verified (wall)",
            target="≤ 30,000 ms",
            target_ms=30_000.0,
            single_ms=(request_s + purge_s) * 1000,
            count=1,
        ),
    ]


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="divide every data size by 10")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {BENCHMARKS}")
    parser.add_argument("--iterations", type=int, default=10, help="timed propagate/assert_fact runs (default 10)")
    parser.add_argument("--queries", type=int, default=200, help="timed search queries per variant (default 200)")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the deletion's find queries first")
    parser.add_argument("--profile", action="store_true", help="cProfile the deletion's request_deletion call")
    parser.add_argument("--fresh", action="store_true", help="drop and recreate the bench database first")
    parser.add_argument("--keep-files", action="store_true", help="keep the temporary vector index and backups")
    args = parser.parse_args()
    only = [b.strip() for b in args.only.split(",") if b.strip()]
    if unknown := sorted(set(only) - set(BENCHMARKS)):
        parser.error(f"unknown benchmarks: {', '.join(unknown)}")

    workdir, unique = configure_environment()
    import django

    django.setup()
    began = time.perf_counter()
    scale = Scale().divided(10) if args.quick else Scale()
    from django.conf import settings
    from django.db import connection

    from bench.measure import statement_mode

    try:
        prepare_database(args.fresh)
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            version = cursor.fetchone()[0]
        say(
            f"bench/stores.py {'--quick ' if args.quick else ''}run {RUN_TAG}: PostgreSQL {version}, Django "
            f"{django.get_version()}, DEBUG={settings.DEBUG}; load average {load_average()}\n"
            f"  statements: {statement_mode()}\n"
            f"  vector index {settings.VECTOR_INDEX_PATH}; cache {CACHE_URL} prefix {unique}; broker {BROKER_URL} "
            f"queue {unique} (no worker); scale {scale}"
        )
        tables: list[tuple[str, list[Row]]] = []
        if "propagation" in only:
            tables.append(("1. propagation", bench_propagation(scale, args.iterations, warmup=2)))
        if "search" in only:
            tables.append(("2. search", bench_search(scale, args.queries, warmup=10)))
        if "deletion" in only:
            tables.append(("3. deletion", bench_deletion(scale, args.explain, args.profile)))
        for title, rows in tables:
            print_table(title, rows)
        if "vectors" in only:
            from bench.vectors import bench_vectors

            say("\n4. vectors: ANN index vs exact scan (bench/vectors.py; `make bench-vectors` for 1M)")
            bench_vectors(VECTOR_BENCH_SIZE // (10 if args.quick else 1), args.queries)
        say(f"\nLoad average at the end: {load_average()}")
    finally:
        connection.close()
        cleanup(workdir, unique, args.keep_files)
        say(f"Total runtime {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
