"""The agent's read path under load, through a real server (`make bench-load`).

gunicorn (memory_admin/gunicorn_conf.py, the production settings: DEBUG off, persistent connections) serves
the bench database on a loopback port; a small httpx/asyncio load generator on the same machine keeps
`--clients` requests in flight for `--seconds` (after a warm-up) against, in turn:

1. the stack's ceiling: a DRF view answering a constant JSON with the same authentication, permission and
   throttle classes (`/api/v1/bench/ceiling/`, served only because BENCH_CEILING_VIEW=1 is set for this
   server; memory_admin/api/ceiling.py);
2. `GET /api/v1/facts/current/?purpose=answer` on `--keys` random fact keys of the 10M table (answers for
   "now" are cached until their record changes, as in production: every key is read once, untimed, before the
   runs, so the figures are the steady state; the cache is a local Redis shared by the workers, `--cache`);
3. `GET /api/v1/facts/current/?purpose=action` on the same keys, made fresh for the run (verified now,
   recheck in 30 days, so no synchronous recheck is needed; never cached). Restored afterwards.

Prints requests/s, p50/p95/p99, errors, the ratio to the ceiling measured in the same run, the web workers'
peak RSS and the load average. Never asserts. Needs the bench data (`make bench` generates it).
Run: `make bench-load` or `make bench-load BENCH_ARGS="--seconds 10 --clients 8"`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python bench/x.py` puts bench/ first on sys.path, where bench/mcp.py would shadow the `mcp` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.measure import percentile, statement_mode  # noqa: E402

TARGET_RATIO = 0.60
CEILING = "/api/v1/bench/ceiling/"
FACTS = "/api/v1/facts/current/"


@dataclass
class Run:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    load: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def pct(self, p: float) -> float:
        return percentile(self.latencies_ms, p) if self.latencies_ms else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_pids(master: int) -> list[int]:
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in children]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


async def drive(
    base: str, token: str, urls: list[str], clients: int, seconds: float, warmup: float, master: int
) -> Run:
    import httpx

    run = Run("")
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    rng = random.Random(7)
    start = time.perf_counter()
    measure_from = start + warmup
    stop = measure_from + seconds

    async def client(http: httpx.AsyncClient) -> None:
        while (now := time.perf_counter()) < stop:
            url = urls[rng.randrange(len(urls))]
            try:
                response = await http.get(url)
                ok = response.status_code == 200
                problem = "" if ok else f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            done = time.perf_counter()
            if now >= measure_from and done <= stop:
                if problem:
                    run.errors[problem] = run.errors.get(problem, 0) + 1
                else:
                    run.latencies_ms.append((done - now) * 1000)

    async def watch_rss() -> None:
        while time.perf_counter() < stop:
            for pid in worker_pids(master):
                run.peak_rss_mb = max(run.peak_rss_mb, rss_mb(pid))
            await asyncio.sleep(0.5)

    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30.0) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)), watch_rss())
    run.seconds = seconds
    run.load = os.getloadavg()[0]
    return run


DEFAULT_CACHE = "redis://127.0.0.1:6379/11"


async def fill(base: str, token: str, urls: list[str], clients: int) -> str:
    """GET each url once with `clients` in flight; returns a count of the statuses."""
    import httpx

    statuses: dict[int, int] = {}
    pending = list(urls)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        while pending:
            response = await http.get(pending.pop())
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60.0) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return ", ".join(f"HTTP {code}: {n:,}" for code, n in sorted(statuses.items()))


def start_server(port: int, workers: int, database_url: str, var_dir: str, cache_url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DEBUG": "0",
        "SECRET_KEY": "bench-only-not-a-secret",
        "SECURE_SSL_REDIRECT": "0",  # loopback, no TLS proxy in front
        "DB_CONN_MAX_AGE": "600",  # persistent connections, as production runs
        "BENCH_CEILING_VIEW": "1",
        "WEB_CONCURRENCY": str(workers),
        "VAR_DIR": var_dir,
        "CACHE_URL": cache_url,
        "CACHE_KEY_PREFIX": f"bench-load-{os.getpid()}",  # this run's keys only (they expire on their own)
        # The throttles run (same classes on every view) but must not refuse the load generator.
        "API_THROTTLE_READS": "100000000/min",
        "API_THROTTLE_READS_PER_ADDRESS": "100000000/min",
    }
    log = open(Path(var_dir) / "gunicorn.log", "wb")
    return subprocess.Popen(
        [
            str(REPO_ROOT / ".venv/bin/gunicorn"),
            "-c",
            "python:memory_admin.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--access-logfile",
            "/dev/null",
            # A worker importing Django on a busy 2-CPU machine can take longer than gunicorn's default 30 s,
            # which would kill and reboot it in a loop before the first request.
            "--timeout",
            "180",
            "memory_admin.wsgi",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_ready(base: str, token: str, proc: subprocess.Popen[bytes], var_dir: str) -> None:
    import httpx

    log = Path(var_dir) / "gunicorn.log"
    deadline = time.time() + 180  # four workers importing Django on a busy 2-CPU machine
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"gunicorn exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(base + CEILING, headers={"Authorization": f"Bearer {token}"}).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    sys.exit(f"gunicorn did not answer within 180 s:\n{log.read_text()[-3000:]}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per endpoint (default 30)")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds first (default 3)")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn sync workers (default 4)")
    parser.add_argument("--keys", type=int, default=2000, help="random fact keys read (default 2000)")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    parser.add_argument(
        "--cache",
        default=os.environ.get("BENCH_CACHE_URL", DEFAULT_CACHE),
        help=f"the servers' CACHE_URL (default $BENCH_CACHE_URL or {DEFAULT_CACHE}; locmem when Redis is down)",
    )
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import tempfile
    from urllib.parse import urlencode

    args = parse_args(argv)
    var_dir = tempfile.mkdtemp(prefix=f"bench-load-{os.getpid()}-")
    os.environ["VAR_DIR"] = var_dir
    from bench.setup import AGENT, TENANT, choose_cache, setup_django

    setup_django()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal, issue_token

    if connection.vendor != "postgresql":
        sys.exit("bench-load needs the PostgreSQL bench database (make bench-load)")
    principal = ensure_principal(TENANT, AGENT, ["agent"])
    token = issue_token(principal, "bench-load")
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(%s)", [(args.seed % 1000) / 1000])
        cursor.execute(
            "SELECT r.id, p.key, r.subject_id, r.predicate, r.last_verified_at, r.recheck_after "
            "FROM memory_memoryrecord r JOIN memory_project p ON p.id = r.project_id "
            "WHERE r.tenant_id = %s AND r.is_head ORDER BY random() LIMIT %s",
            [principal.tenant_id, args.keys],
        )
        heads = cursor.fetchall()
        total = cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'memory_memoryrecord'")
        total = cursor.fetchone()[0]
    if not heads:
        sys.exit("No bench data: run `make bench` first")
    now = timezone.now()
    ids = [h[0] for h in heads]
    with connection.cursor() as cursor:  # fresh values for purpose=action: no synchronous recheck needed
        cursor.execute(
            "UPDATE memory_memoryrecord SET last_verified_at = %s, recheck_after = %s WHERE id = ANY(%s)",
            [now, now + timedelta(days=30), ids],
        )
    connection.close()

    def urls(purpose: str) -> list[str]:
        return [
            FACTS + "?" + urlencode({"project_id": p, "subject_id": s, "predicate": k, "purpose": purpose})
            for _, p, s, k, _, _ in heads
        ]

    cache_url, cache_note = choose_cache(args.cache)
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    db = settings.DATABASES["default"]
    database_url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    print(
        f"gunicorn: {args.workers} sync workers on {base} (memory_admin.gunicorn_conf, DEBUG off), database "
        f"{db['NAME']} (~{total:,} records); load: {args.clients} clients, {args.warmup:g} s warm-up + "
        f"{args.seconds:g} s per endpoint, {len(heads):,} keys; cache {cache_url} ({cache_note}); "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; statements: {statement_mode()} "
        "(the workers inherit the environment)",
        flush=True,
    )
    proc = start_server(port, args.workers, database_url, var_dir, cache_url)
    runs: list[Run] = []
    try:
        wait_ready(base, token, proc, var_dir)
        # Answers for "now" are cached until their record changes: read every key once, untimed, so the run
        # measures the steady state (a hit) rather than the first read of each key (a fill).
        filled = asyncio.run(fill(base, token, urls("answer"), args.clients))
        print(f"  cache filled: {len(heads):,} keys read once ({filled})", flush=True)
        for name, targets in (
            ("ceiling: constant JSON, same auth", [CEILING]),
            ("facts/current purpose=answer", urls("answer")),
            ("facts/current purpose=action (fresh)", urls("action")),
        ):
            run = asyncio.run(drive(base, token, targets, args.clients, args.seconds, args.warmup, proc.pid))
            run.name = name
            runs.append(run)
            print(f"  {name}: {run.rate:,.0f} req/s", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        with connection.cursor() as cursor:
            for pk, _, _, _, verified, recheck in heads:
                cursor.execute(
                    "UPDATE memory_memoryrecord SET last_verified_at = %s, recheck_after = %s WHERE id = %s",
                    [verified, recheck, pk],
                )
        connection.close()
        import shutil

        shutil.rmtree(var_dir, ignore_errors=True)

    ceiling = runs[0].rate
    print()
    header = f"{'endpoint':<40} {'req/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'errors':>6} {'ratio':>6} {'met':<4} {'RSS MB':>7} {'load':>5}"
    print(header)
    print("-" * len(header))
    for i, run in enumerate(runs):
        ratio = run.rate / ceiling if ceiling else float("nan")
        errors = sum(run.errors.values())
        met = "" if i == 0 else ("yes" if ratio >= TARGET_RATIO and errors == 0 else "NO")
        print(
            f"{run.name:<40} {run.rate:>8,.0f} {run.pct(50):>7.2f} {run.pct(95):>7.2f} {run.pct(99):>7.2f} "
            f"{errors:>6} {ratio:>6.2f} {met:<4} {run.peak_rss_mb:>7.1f} {run.load:>5.2f}"
        )
        if run.errors:
            print(f"    errors: {run.errors}")
    print(
        f"Target: facts/current >= {TARGET_RATIO:.0%} of the ceiling's req/s with 0 errors. RSS: the largest "
        "gunicorn worker's peak during that endpoint's run. The load generator runs on the same CPUs."
    )


if __name__ == "__main__":
    main()
