"""Figure: the MCP tool `recall` over Streamable HTTP next to the API call it wraps, `GET /api/v1/facts/current/`.

(Not named bench/mcp.py: run as a script, a file of that name in bench/ would shadow the `mcp` SDK for every
bench script.) Run (PostgreSQL; the database is created if missing and migrated):

    make bench-mcp                      # or:
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_mcp .venv/bin/python bench/mcp_recall.py

1. Data: one tenant of this run with an agent and its token, and `--records` facts (one per subject) written
   with `assert_fact`, so the table the read looks in is not empty.
2. Server: gunicorn (WSGI, one sync worker, production profile: DEBUG=0, plain http on loopback) serving the
   app on a free port; local-memory cache; throttles raised so the bench is not refused.
3. Each key is read once through the API first, so both paths find the cached answer (the same cache key:
   `recall` calls the same read). Then, per iteration, the same random key is read through the API with
   httpx2 and through `recall` with the official SDK's client (Streamable HTTP, `Client.call_tool`), in
   alternating order; each round trip is timed on the client.

What the wrapper adds: the JSON-RPC envelope and the SDK's per-request stateless transport on the server,
the audit event every MCP call writes (the API does not audit reads), and the SDK client's own work. The
ratio is printed next to the issue's target (the wrapper adds at most 20%); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
RUN_TAG = secrets.token_hex(3)
PROJECT = "bench-mcp"
PREDICATE = "status"


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def setup_django(var_dir: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    os.environ["VAR_DIR"] = var_dir  # broker folders and the vector index of this run, not the developer's
    os.environ["CELERY_BROKER_URL"] = "filesystem://"
    os.environ["CACHE_URL"] = "locmem://"
    import logging

    import django

    django.setup()
    for name in ("httpx", "httpx2", "mcp"):  # one INFO line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)


def prepare_database() -> None:
    import psycopg
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections
    from psycopg import sql

    if connection.vendor != "postgresql":
        sys.exit(
            "bench/mcp_recall.py needs PostgreSQL: run `make bench-mcp` or set DATABASE_URL to a *bench* database."
        )
    db = settings.DATABASES["default"]
    connections.close_all()
    with psycopg.connect(
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        dbname="postgres",
        autocommit=True,
    ) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone() is None:
            print(f"Creating database {db['NAME']}")
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
    call_command("migrate", interactive=False, verbosity=0)


def seed(records: int) -> tuple[str, list[str]]:
    """A tenant of this run, its agent's token, and `records` facts; returns the token and the subjects."""
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal, issue_token
    from memory_admin.accounts.tenancy import tenant_context
    from memory_admin.memory.actions import Assertion, assert_fact

    agent = ensure_principal(f"bench-mcp-{RUN_TAG}", "agent", ["agent"])
    subjects = [f"subject-{i:06d}" for i in range(records)]
    started = time.perf_counter()
    now = timezone.now()
    with tenant_context(agent.tenant_pk):
        for subject in subjects:
            assert_fact(
                agent,
                Assertion(
                    project_id=PROJECT,
                    subject_id=subject,
                    predicate=PREDICATE,
                    value={"state": "open", "owner": subject},
                    valid_from=now,
                    source_canonical_ref=f"bench:{subject}",
                    source_revision="r1",
                ),
            )
    print(f"Wrote {records} facts in {time.perf_counter() - started:.1f} s")
    return issue_token(agent), subjects


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def gunicorn(port: int, var_dir: str) -> Iterator[str]:
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "CACHE_URL": "locmem://",
        "VAR_DIR": var_dir,
        **{f"API_THROTTLE_{s}": "1000000/min" for s in ("READS", "WRITES", "SEARCH")},
        **{f"API_THROTTLE_{s}_PER_ADDRESS": "1000000/min" for s in ("READS", "WRITES", "SEARCH")},
    }
    log_path = Path(var_dir) / "gunicorn.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                str(REPO_ROOT / ".venv" / "bin" / "gunicorn"),
                "--workers",
                "1",
                "--bind",
                f"127.0.0.1:{port}",
                "memory_admin.wsgi",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            import httpx

            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(f"{base}/api/v1/schema/", timeout=5)
                    break
                except httpx.TransportError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        sys.exit(f"gunicorn did not start; see {log_path}")
                    time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


async def measure(
    base: str, token: str, subjects: list[str], iterations: int, warmup: int, seed_: int
) -> dict[str, list[float]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    rng = random.Random(seed_)
    headers = {"Authorization": f"Bearer {token}"}
    samples: dict[str, list[float]] = {"api": [], "mcp": []}
    async with (
        httpx2.AsyncClient(base_url=base, headers=headers, timeout=30) as api,
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
    ):
        for subject in subjects:  # both paths then read a cached answer (the same key)
            (await api.get("/api/v1/facts/current/", params=_key(subject))).raise_for_status()
        async with Client(streamable_http_client(f"{base}/mcp/", http_client=http)) as client:

            async def via_api(subject: str) -> float:
                t0 = time.perf_counter()
                response = await api.get("/api/v1/facts/current/", params=_key(subject))
                elapsed = (time.perf_counter() - t0) * 1000
                if response.status_code != 200 or response.json()["subject_id"] != subject:
                    sys.exit(f"API answered {response.status_code}: {response.text[:200]}")
                return elapsed

            async def via_mcp(subject: str) -> float:
                t0 = time.perf_counter()
                result = await client.call_tool("recall", _key(subject))
                elapsed = (time.perf_counter() - t0) * 1000
                if result.is_error or (result.structured_content or {}).get("subject_id") != subject:
                    sys.exit(f"recall failed: {result.content[0]}")
                return elapsed

            for i in range(warmup + iterations):
                subject = rng.choice(subjects)
                order = [("api", via_api), ("mcp", via_mcp)]
                if i % 2:
                    order.reverse()
                for name, fn in order:
                    elapsed = await fn(subject)
                    if i >= warmup:
                        samples[name].append(elapsed)
    return samples


def _key(subject: str) -> dict[str, str]:
    return {"project_id": PROJECT, "subject_id": subject, "predicate": PREDICATE}


def report(samples: dict[str, list[float]]) -> None:
    api, mcp = samples["api"], samples["mcp"]
    rows = [
        ("GET /api/v1/facts/current/ (httpx2)", api),
        ("MCP recall over Streamable HTTP (SDK Client)", mcp),
    ]
    print(f"\n{'round trip':<48} {'n':>5} {'median ms':>10} {'p95 ms':>8}")
    for name, values in rows:
        print(f"{name:<48} {len(values):>5} {statistics.median(values):>10.2f} {percentile(values, 95):>8.2f}")
    median_ratio = statistics.median(mcp) / statistics.median(api)
    p95_ratio = percentile(mcp, 95) / percentile(api, 95)
    print(
        f"\nratio recall / API: median {median_ratio:.2f}, p95 {p95_ratio:.2f} "
        f"(target: the wrapper adds <= 20%, i.e. <= 1.20; {'met' if median_ratio <= 1.2 else 'not met'} at the median)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000, help="facts written before measuring")
    parser.add_argument("--iterations", type=int, default=300, help="timed reads per path")
    parser.add_argument("--warmup", type=int, default=30, help="untimed reads per path first")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    if hasattr(os, "getloadavg"):
        print("load average: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    var_dir = tempfile.mkdtemp(prefix="bench-mcp-", dir=REPO_ROOT / "var") if (REPO_ROOT / "var").is_dir() else None
    var_dir = var_dir or tempfile.mkdtemp(prefix="bench-mcp-")
    setup_django(var_dir)
    prepare_database()
    token, subjects = seed(args.records)
    with gunicorn(free_port(), var_dir) as base:
        print(f"Serving on {base} (gunicorn, 1 sync worker, DEBUG=0); {args.iterations} reads per path")
        samples = asyncio.run(measure(base, token, subjects, args.iterations, args.warmup, args.seed))
    report(samples)


if __name__ == "__main__":
    main()
