"""Recheck engine benchmarks: the sweep's selection and rechecks per second on real Celery workers.

1. `make_due` makes a fixed subset of the accepted heads due (`recheck_after` in the past, one UPDATE);
   nothing else of the tenant stays due, so every run selects exactly that subset.
2. `bench_claim` times `rechecks.claim_due` claiming the whole subset in one call (next to the floor:
   reading the same due ids without claiming them), then in batches until nothing is left; claims are
   reset (claim rows deleted, stamps cleared) before each timed run. The claim statement's plan is
   printed (EXPLAIN ANALYZE, rolled back).
3. `bench_recheck_rate` serves every due record's current value from a loopback HTTP server (so the
   outcomes are verified_unchanged), points tenant-wide field policies at it, starts Celery workers on
   a unique Redis queue, enqueues `sweep_due_rechecks(limit=N)` and waits until N records have a new
   RecheckAttempt. The policies are removed afterwards; `restore` clears the subset's recheck dates.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.measure import Figure

REPO_ROOT = Path(__file__).resolve().parent.parent
TARGET_CLAIM_MS = 1000.0
STALL_SECONDS = 60.0  # the rate run gives up when no recheck lands for this long
READY_SECONDS = 60.0  # workers must answer a ping within this


# --- The due subset -----------------------------------------------------------------------------


def make_due(tenant_id: int, count: int, seed: int) -> tuple[list[int], str]:
    """Make `count` accepted heads due, oldest first in a fixed order; returns their ids and a note."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        # Whatever an earlier (interrupted) run left due is not due any more.
        cursor.execute(
            "UPDATE memory_memoryrecord SET recheck_after = NULL, recheck_claimed_at = NULL "
            "WHERE tenant_id = %s AND status = 'accepted' AND recheck_after <= now()",
            [tenant_id],
        )
        stray = cursor.rowcount
        cursor.execute(
            """
            UPDATE memory_memoryrecord r
            SET recheck_after = now() - interval '1 day' - c.n * interval '1 second', recheck_claimed_at = NULL
            FROM (
                SELECT id, row_number() OVER (ORDER BY md5(id::text || %s)) AS n
                FROM memory_memoryrecord
                WHERE tenant_id = %s AND is_head AND status = 'accepted'
                ORDER BY md5(id::text || %s) LIMIT %s
            ) c
            WHERE r.id = c.id
            RETURNING r.id
            """,
            [str(seed), tenant_id, str(seed), count],
        )
        ids = [int(row[0]) for row in cursor.fetchall()]
        updated = time.perf_counter()
        cursor.execute("VACUUM (ANALYZE) memory_memoryrecord")  # the timed runs start without dead rows
    note = (
        f"due subset: {len(ids):,} accepted heads made due in one UPDATE ({updated - started:.1f} s"
        + (f", {stray:,} stray due rows cleared first" if stray else "")
        + f"), then VACUUM ANALYZE ({time.perf_counter() - updated:.1f} s)"
    )
    return ids, note


def reset_claims(ids: list[int]) -> None:
    """The subset is unclaimed: no stamp (SQLite's claims, or left by an older version) and no claim row."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_memoryrecord SET recheck_claimed_at = NULL "
            "WHERE id = ANY(%s) AND recheck_claimed_at IS NOT NULL",
            [ids],
        )
        cursor.execute("DELETE FROM memory_recheckclaim WHERE record_id = ANY(%s)", [ids])


def restore(tenant_id: int, ids: list[int]) -> str:
    """The subset is no longer due nor claimed (verification dates are kept); then VACUUM ANALYZE."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_memoryrecord SET recheck_after = NULL, recheck_claimed_at = NULL WHERE id = ANY(%s)",
            [ids],
        )
        cursor.execute("DELETE FROM memory_recheckclaim WHERE record_id = ANY(%s)", [ids])
        cursor.execute("VACUUM (ANALYZE) memory_memoryrecord")
    return f"due subset restored (recheck_after and claims cleared) and table vacuumed in {time.perf_counter() - started:.1f} s"


# --- claim_due ----------------------------------------------------------------------------------


class StatementTimer:
    """An execute wrapper: milliseconds per statement, keyed by its first word (SELECT, DELETE, WITH); keeps
    the last statement starting with `keep` and its parameters (the claim, for EXPLAIN)."""

    def __init__(self, keep: str = "WITH") -> None:
        self.ms: defaultdict[str, float] = defaultdict(float)
        self.keep = keep
        self.kept: tuple[str, Any] | None = None

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            first = sql.split(None, 1)[0].upper()
            self.ms[first] += (time.perf_counter() - t0) * 1000
            if first == self.keep:
                self.kept = (sql, params)


def explain_claim(statement: tuple[str, Any] | None, ids: list[int]) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS, WAL) of claim_due's own statement on the unclaimed subset, rolled back."""
    from django.db import connection, transaction

    if statement is None:
        return ["claim plan: no WITH statement was run (not PostgreSQL?)"]
    reset_claims(ids)
    sql, params = statement
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) " + sql, params)
            plan = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    return ["claim plan: " + line for line in plan]


def bench_claim(ids: list[int], runs: int, batch: int) -> tuple[list[Figure], list[str]]:
    from django.db import connection
    from django.utils import timezone

    from memory_admin.memory import rechecks
    from memory_admin.memory.models import MemoryRecord

    count = len(ids)
    expected = set(ids)
    problems: list[str] = []
    samples: list[float] = []
    floor: list[float] = []
    split: list[dict[str, float]] = []
    timer = StatementTimer()
    for run in range(runs):
        # The floor: reading the same due ids, oldest first, without claiming them (no claims table either).
        t0 = time.perf_counter()
        read = list(
            MemoryRecord.objects.due_for_recheck(timezone.now())
            .order_by("recheck_after", "id")
            .values_list("id", flat=True)[:count]
        )
        floor.append((time.perf_counter() - t0) * 1000)
        if set(read) != expected:
            problems.append(
                f"run {run + 1}: {len(read):,} due records read, {len(set(read) & expected):,} of the subset"
            )
        reset_claims(ids)
        timer.ms = defaultdict(float)
        with connection.execute_wrapper(timer):
            t0 = time.perf_counter()
            claimed = rechecks.claim_due(limit=count)
            samples.append((time.perf_counter() - t0) * 1000)
        split.append(timer.ms)
        if set(claimed) != expected:
            problems.append(f"run {run + 1}: claimed {len(claimed):,}, {len(set(claimed) & expected):,} of the subset")

    def median_of(word: str) -> float:
        return sorted(s.get(word, 0.0) for s in split)[len(split) // 2]

    one = Figure(
        f"claim_due(limit={count:,}), one call",
        samples,
        f"median <= {TARGET_CLAIM_MS:g} ms",
        note=(
            f"lock {median_of('SELECT'):,.0f} ms + expired claims {median_of('DELETE'):,.0f} ms + "
            f"WITH (due ids, index only) INSERT INTO claims {median_of('WITH'):,.0f} ms + commit (median run); "
            f"{statistics.median(samples) / statistics.median(floor):.1f}x the floor"
        ),
    )
    one.met = one.median <= TARGET_CLAIM_MS
    read_floor = Figure(
        f"floor: read the {count:,} due ids, no claim",
        floor,
        note="the same due records, oldest first, through the ORM; any claim design reads at least this",
    )

    reset_claims(ids)
    batches: list[float] = []
    got: list[int] = []
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        claimed = rechecks.claim_due(limit=batch)
        if not claimed:
            break
        batches.append((time.perf_counter() - t0) * 1000)
        got += claimed
    total_ms = (time.perf_counter() - started) * 1000
    if set(got) != expected or len(got) != len(set(got)):
        problems.append(
            f"batches: claimed {len(got):,} ({len(set(got)):,} distinct), {len(set(got) & expected):,} of the subset"
        )
    batched = Figure(
        f"claim_due(limit={batch:,}) until empty",
        batches,
        f"total <= {TARGET_CLAIM_MS:g} ms",
        met=total_ms <= TARGET_CLAIM_MS,
        note=f"total {total_ms / 1000:.2f} s for {len(got):,} in {len(batches)} calls (+1 empty)",
    )
    notes = [
        f"claim_due: every run claimed exactly the {count:,} due records"
        if not problems
        else "claim_due: " + "; ".join(problems)
    ]
    notes += explain_claim(timer.kept, ids)
    return [one, read_floor, batched], notes


# --- Rechecks per second on Celery --------------------------------------------------------------


class SourceHandler(BaseHTTPRequestHandler):
    """GET /<project>/<subject>/<predicate> → {"data": {"deadline": <value>, "revision": <rev>}}."""

    server: CanonicalSource

    def do_GET(self) -> None:
        body = self.server.answers.get(self.path)
        self.server.count(body is not None)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class CanonicalSource(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answers: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), SourceHandler)
        self.answers = answers
        self.served: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, found: bool) -> None:
        with self._lock:
            self.served["200" if found else "404"] += 1

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def canonical_source(ids: list[int]) -> Iterator[CanonicalSource]:
    """A loopback HTTP server answering each record's current value and source revision."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT '/' || p.key || '/' || r.subject_id || '/' || r.predicate, r.value::text, r.source_revision
            FROM memory_memoryrecord r JOIN memory_project p ON p.id = r.project_id
            WHERE r.id = ANY(%s)
            """,
            [ids],
        )
        answers = {
            path: f'{{"data": {{"deadline": {value}, "revision": {json.dumps(revision)}}}}}'.encode()
            for path, value, revision in cursor.fetchall()
        }
    server = CanonicalSource(answers)
    thread = threading.Thread(target=server.serve_forever, name="canonical-source", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def field_policies(tenant_id: int, ids: list[int], port: int) -> Iterator[int]:
    """Tenant-wide policies (project null) for the subset's predicates, reading the loopback source."""
    from memory_admin.memory.models import FieldPolicy, MemoryRecord
    from memory_admin.memory.policies import validate_canonical_source

    source = {
        "connector": "http_json",
        "url_template": f"http://127.0.0.1:{port}/{{project_id}}/{{subject_id}}/{{predicate}}",
        "value_pointer": "/data/deadline",
        "revision_pointer": "/data/revision",
        "timeout_seconds": 5,
    }
    problems = validate_canonical_source(source, None)
    if problems:
        sys.exit(f"The bench's canonical source is refused: {problems}")
    predicates = sorted(set(MemoryRecord.objects.filter(id__in=ids).values_list("predicate", flat=True)))
    pks = []
    try:
        for predicate in predicates:
            policy, _ = FieldPolicy.objects.update_or_create(
                tenant_id=tenant_id,
                project=None,
                predicate=predicate,
                defaults={"canonical_source": source, "recheck_interval": timedelta(days=1)},
            )
            pks.append(policy.pk)
        yield len(pks)
    finally:
        FieldPolicy.objects.filter(pk__in=pks).delete()


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot from /proc/stat (Linux), else None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def process_states(pids: list[int]) -> str:
    """Each process and its descendants: state and kernel wait channel (Linux /proc), for a stuck run."""
    seen: list[str] = []
    todo = list(pids)
    while todo:
        pid = todo.pop(0)
        proc = Path(f"/proc/{pid}")
        try:
            state = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("State:"))
            wchan = (proc / "wchan").read_text().strip() or "-"
            threads = len(list((proc / "task").iterdir()))
            for task in (proc / "task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration):
            continue
        seen.append(f"{pid} {state.split(None, 1)[1]} wchan={wchan} threads={threads}")
    return "; ".join(seen) or "none alive"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def broker_reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1):
            return True
    except OSError:
        return False


BROKER_PROBLEM: list[str] = []  # why the bench runs on the in-memory broker, if it does


def ensure_broker(url: str) -> str | None:
    """None when the broker answers (starting the local Redis with bin/ensure-redis if needed), else why not."""
    if broker_reachable(url):
        return None
    parts = urlsplit(url)
    if parts.scheme == "redis" and parts.hostname == "127.0.0.1" and (parts.port or 6379) == 6379:
        subprocess.run([str(REPO_ROOT / "bin" / "ensure-redis")], check=False, capture_output=True)
        if broker_reachable(url):
            return None
    return f"no broker answers at {url} (bin/ensure-redis starts a local Redis when redis-server is installed)"


def worker_env(queue: str) -> dict[str, str]:
    """The bench's database, broker and VAR_DIR, DEBUG off, and `queue` as the workers' default queue.

    The sweep enqueues its rechecks on the default queue, so they reach these workers and only them.
    """
    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return {
        **os.environ,  # with VAR_DIR and VECTOR_INDEX_PATH of this run (bench/run.py `isolate`)
        "DATABASE_URL": f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "DEBUG": "0",
        "SECRET_KEY": settings.SECRET_KEY,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
    }


def delete_queue(queue: str) -> int:
    """Delete a queue of this run with its binding; returns how many messages it still held."""
    from memory_admin.celery import app

    with app.connection_for_write() as conn:
        bound = app.amqp.queues[queue](conn.default_channel)
        bound.declare()  # the channel deletes only the bindings it knows
        left = int(bound.purge() or 0)
        bound.delete()
    return left


def drop_side_effects() -> str:
    """Drop what the benchmarks enqueued as side effects on the bench process's own queue, unrun.

    assert_fact enqueues a `refresh_record_vectors` task per write after commit; nothing consumes the
    bench process's queue, so those tasks are counted (by name, on Redis) and deleted here.
    """
    from django.conf import settings

    url, queue = settings.CELERY_BROKER_URL, settings.CELERY_TASK_DEFAULT_QUEUE
    if url.startswith("memory://"):
        return "tasks enqueued as side effects went to an in-memory broker and were discarded unrun"
    names: Counter[str] = Counter()
    if urlsplit(url).scheme in ("redis", "rediss"):
        import redis

        for raw in redis.Redis.from_url(url).lrange(queue, 0, -1):
            names[json.loads(raw).get("headers", {}).get("task", "?")] += 1
    left = delete_queue(queue)
    detail = f" ({', '.join(f'{name}: {n:,}' for name, n in names.most_common())})" if names else ""
    return f"{left:,} tasks enqueued as side effects on queue {queue} were dropped unrun{detail}"


def worker_commands(pool: str, workers: int, queue: str) -> list[list[str]]:
    base = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "memory_admin",
        "worker",
        "--loglevel=INFO",
        "--without-mingle",
        "--without-gossip",
        "-Q",
        queue,
    ]
    if pool == "prefork":
        return [[*base, "--pool=prefork", f"--concurrency={workers}", "-n", f"{queue}@%h"]]
    return [[*base, "--pool=solo", "-n", f"{queue}-{i}@%h"] for i in range(workers)]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> str:
    """Warm shutdown (SIGTERM), wait; a worker (or its pool) still alive after 30 s is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    killed = 0
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed += 1
        try:  # each worker leads its own process group (start_new_session); its pool children too
            os.killpg(proc.pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return "stopped cleanly" if not killed else f"{killed} process(es) had to be killed"


@contextmanager
def celery_workers(
    pool: str, workers: int, queue: str, log: Path, stopped: list[str]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    from memory_admin.celery import app

    env = worker_env(queue)
    procs: list[subprocess.Popen[bytes]] = []
    with log.open("wb") as out:
        try:
            for command in worker_commands(pool, workers, queue):
                procs.append(
                    subprocess.Popen(
                        command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
            deadline = time.monotonic() + READY_SECONDS
            ready: set[str] = set()
            while len(ready) < len(procs):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    sys.exit(f"Celery workers did not come up; see {log}:\n{log.read_text()[-3000:]}")
                for reply in app.control.ping(timeout=0.5):
                    ready |= {name for name in reply if name.startswith(queue)}
            yield procs
        finally:
            stopped.append(stop_workers(procs))
            delete_queue(queue)


def bench_recheck_rate(
    tenant_id: int, ids: list[int], n: int, workers: int, pool: str
) -> tuple[list[Figure], list[str]]:
    from django.conf import settings
    from django.db import connection
    from django.db.models import Count, Max
    from django.utils import timezone

    from memory_admin.memory.models import MemoryRecord, RecheckAttempt
    from memory_admin.memory.tasks import sweep_due_rechecks

    label = f"{workers} worker processes" if pool == "solo" else f"1 prefork worker, {workers} children"
    name = f"rechecks via Celery ({workers} processes, {pool})"
    if settings.CELERY_BROKER_URL.startswith("memory://"):
        return [Figure(name, [], note=f"skipped: {BROKER_PROBLEM[0] if BROKER_PROBLEM else 'no broker'}")], []
    n = min(n, len(ids))
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-rechecks"  # not the bench process's side-effect queue
    stuck = ""
    reset_claims(ids)
    log = Path(tempfile.mkstemp(prefix="bench-celery-", suffix=".log")[1])
    notes: list[str] = []
    with canonical_source(ids) as source, field_policies(tenant_id, ids, source.port) as policies:
        stopped: list[str] = []
        cpu_before = children_cpu_s()
        with celery_workers(pool, workers, queue, log, stopped) as procs:
            baseline = RecheckAttempt.objects.aggregate(m=Max("id"))["m"] or 0
            started, wall_started, ticks_before = time.perf_counter(), time.time(), cpu_ticks()
            sweep_due_rechecks.apply_async(kwargs={"limit": n}, queue=queue)
            done, last_change, last_done = 0, time.perf_counter(), -1
            while done < n:
                time.sleep(0.1)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(DISTINCT record_id) FROM memory_recheckattempt WHERE id > %s", [baseline]
                    )
                    done = int(cursor.fetchone()[0])
                now = time.perf_counter()
                if done != last_done:
                    last_done, last_change = done, now
                elif now - last_change > STALL_SECONDS or any(p.poll() is not None for p in procs):
                    break
                elif done == 0 and now - last_change > 5 and "Traceback" in log.read_text(errors="replace"):
                    break  # the sweep task failed: no recheck will come
            elapsed = time.perf_counter() - started
            ticks_after = cpu_ticks()
            if done < n:
                claimed = MemoryRecord.objects.filter(id__in=ids, recheck_claimed_at__isnull=False).count()
                stuck = f"the sweep had claimed {claimed:,} records; workers: {process_states([p.pid for p in procs])}"
        served = dict(source.served)
        workers_cpu = children_cpu_s() - cpu_before  # the stopped workers and their pool, start-up included
    attempts = RecheckAttempt.objects.filter(id__gt=baseline)
    outcomes = dict(attempts.order_by().values_list("outcome").annotate(n=Count("id")))
    rechecked = list(attempts.values_list("record_id", flat=True).distinct())
    fetch_ms = sorted(attempts.values_list("duration_ms", flat=True))
    times = sorted(attempts.values_list("attempted_at", flat=True))
    fresh = MemoryRecord.objects.filter(
        id__in=rechecked,
        recheck_claimed_at__isnull=True,
        last_verified_at__isnull=False,
        recheck_after__gt=timezone.now(),
    ).count()
    complete = done >= n
    rate = done / elapsed if elapsed else math.nan
    figure = Figure(
        name,
        [],
        count=done,
        note=(
            f"{rate:,.0f} rechecks/s ({done:,} of {n:,} records in {elapsed:.2f} s, {label})"
            + ("" if complete else f"; INCOMPLETE, see {log}")
        ),
    )
    notes.append(f"rechecks: outcomes {outcomes}; {attempts.count():,} attempts for {len(rechecked):,} records")
    if times:
        first = times[0].timestamp() - wall_started
        last = times[-1].timestamp() - wall_started
        steady = (len(times) - 1) / (last - first) if last > first else math.nan
        notes.append(
            f"rechecks: first attempt {first:.2f} s after the sweep was enqueued, last {last:.2f} s "
            f"({steady:,.0f}/s between them); source fetch median {fetch_ms[len(fetch_ms) // 2]} ms"
        )
    busy = ""
    if ticks_before and ticks_after and ticks_after[1] > ticks_before[1]:
        share = (ticks_after[0] - ticks_before[0]) / (ticks_after[1] - ticks_before[1])
        busy = f"; all CPUs {share:.0%} busy during the run (workers, PostgreSQL, source, anything else)"
    if done:
        notes.append(f"rechecks: worker CPU {workers_cpu * 1000 / done:.1f} ms per recheck (start-up included){busy}")
    notes.append(
        f"rechecks: {fresh:,}/{len(rechecked):,} rechecked records verified, unclaimed, next recheck in a day; "
        f"canonical source answered {served}; {policies} field policies (removed afterwards); workers {stopped[0]}"
    )
    if complete:
        log.unlink(missing_ok=True)
    else:
        errors = [line for line in log.read_text(errors="replace").splitlines() if "Error" in line]
        notes.append(f"rechecks: INCOMPLETE; last error in the worker log: {errors[-1] if errors else 'none'}")
        notes.append(f"rechecks: INCOMPLETE; {stuck}")
    return [figure], notes
