"""Figures: `GovernedStore.get` and `.search` (k=10) over 100k records next to the raw API calls they wrap.

Run (PostgreSQL; the database is created if missing and migrated):

    make bench-integrations             # or:
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_integrations .venv/bin/python bench/integrations.py

1. Data: one tenant of this run, one project, `--records` current facts (subjects x predicates) COPYed into
   PostgreSQL and their vector entries upserted into a fresh LanceDB index (bench/stores.py's helpers).
2. Server: gunicorn on a free loopback port (one sync worker, DEBUG=0, throttles raised, local-memory
   cache), reading the same database and index.
3. Per iteration, in alternating order, on the same random key or query:
   - raw get: `GET /api/v1/facts/current/` with httpx; `GovernedStore.get` (that call with `session_id`, so
     the server registers the context load in the same request), and `GovernedStore.get` with
     `register_loads=False` (the read without registering: what the wrapper itself adds);
   - raw search: `GET /api/v1/search/?k=10` with httpx; `GovernedStore.search(limit=10)`, which makes that
     call with `session_id` (each usable hit carries its governance facts, decided by the database at the
     search's instant, and the server registers the usable hits as loaded); and `GovernedStore.search` with
     `register_loads=False` (the search alone). Against a server that does not echo the registration the
     store falls back to a second call, `POST /api/v1/context-loads/`.
Each figure is a client-side round trip; median and p95, and the ratio wrapper / raw (the issue's target:
the wrapper adds at most 20%). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
# Run as a script, bench/ comes first on sys.path, where a bench module could shadow a package of its name.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
sys.path.insert(0, str(REPO_ROOT))

from bench import stores  # noqa: E402  (environment, database, COPY, words)

PROJECT = "bench-integrations"
PREDICATES = stores.PREDICATES


def seed(records: int) -> tuple[str, int, list[tuple[str, str]]]:
    """A tenant of this run with an agent token, `records` current facts COPYed, and their vector entries."""
    from django.db import transaction
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal, issue_token
    from memory_admin.derived.tasks import record_text
    from memory_admin.derived.vectors import VectorEntry, get_index
    from memory_admin.memory.models import MemoryRecord, Project, new_public_id

    agent = ensure_principal(f"bench-int-{stores.RUN_TAG}", "agent", ["agent"])
    tenant_id: int = agent.tenant_id  # type: ignore[assignment]
    project = Project.objects.get_or_create(tenant_id=tenant_id, key=PROJECT)[0]
    rng = random.Random(3)
    now = timezone.now()
    started = time.perf_counter()
    first_id = stores.reserve_ids(MemoryRecord, records)
    rows: list[dict[str, Any]] = []
    entries: list[VectorEntry] = []
    keys: list[tuple[str, str]] = []
    for i in range(records):
        s, p = divmod(i, len(PREDICATES))
        subject, predicate = f"cust-{s:05d}", PREDICATES[p]
        valid_from = now - timedelta(days=1 + rng.randrange(300))
        row = {
            "id": first_id + i,
            "tenant_id": tenant_id,
            "project_id": project.pk,
            "memory_id": new_public_id("mem"),
            "subject_id": subject,
            "predicate": predicate,
            "value": {"text": stores.words(rng, rng.randint(3, 8))},
            "status": "accepted",
            "valid_from": valid_from,
            "recorded_from": valid_from,
            "revision": 1,
            "source_canonical_ref": f"bench://crm/{subject}",
            "source_revision": "1",
            "issuer_id": agent.pk,
            "entered_current": True,
            "is_head": True,
        }
        rows.append(row)
        keys.append((subject, predicate))
        text = record_text(MemoryRecord(subject_id=subject, predicate=predicate, value=row["value"]))
        entries.append(
            VectorEntry(
                entry_id=f"record:{row['memory_id']}",
                tenant_id=tenant_id,
                project_id=PROJECT,
                kind="record",
                object_id=str(row["memory_id"]),
                revision=1,
                text=text,
                usable=True,
            )
        )
    with transaction.atomic():
        stores.copy_rows(MemoryRecord, rows)
    stores.analyze(MemoryRecord)
    index = get_index()
    for start in range(0, len(entries), 5_000):
        index.upsert(entries[start : start + 5_000])
    print(f"Seeded {records:,} facts and vector entries in {time.perf_counter() - started:.1f} s")
    return issue_token(agent), tenant_id, keys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def gunicorn(workdir: Path) -> Iterator[str]:
    """gunicorn (one sync worker, DEBUG=0, plain http) on a free loopback port, on the bench's database and
    index (os.environ as configure_environment set it), with the API throttles raised."""
    import httpx

    port = free_port()
    env = {
        **os.environ,
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "CACHE_URL": "locmem://",
        "VAR_DIR": str(workdir),
        **{f"API_THROTTLE_{s}": "1000000/min" for s in ("READS", "WRITES", "SEARCH")},
        **{f"API_THROTTLE_{s}_PER_ADDRESS": "1000000/min" for s in ("READS", "WRITES", "SEARCH")},
    }
    log_path = workdir / "gunicorn.log"
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
            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(f"{base}/api/v1/schema/", timeout=5, trust_env=False)
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


def measure(base: str, token: str, keys: list[tuple[str, str]], iterations: int, warmup: int) -> dict[str, list[float]]:
    import httpx
    from memory_governance.langgraph_store import GovernedStore

    rng = random.Random(11)
    raw = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30, trust_env=False)
    store = GovernedStore(base, token, project_id=PROJECT)
    bare = GovernedStore(base, token, project_id=PROJECT, register_loads=False)
    samples: dict[str, list[float]] = {}

    def timed(name: str, fn: Callable[[], Any], keep: bool) -> None:
        t0 = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - t0) * 1000
        if keep:
            samples.setdefault(name, []).append(elapsed)

    def raw_get(subject: str, predicate: str) -> None:
        params = {"project_id": PROJECT, "subject_id": subject, "predicate": predicate}
        response = raw.get("/api/v1/facts/current/", params=params)
        if response.status_code != 200:
            sys.exit(f"API answered {response.status_code}: {response.text[:200]}")

    def raw_search(q: str) -> None:
        response = raw.get("/api/v1/search/", params={"project_id": PROJECT, "q": q, "k": 10})
        if response.status_code != 200 or not response.json()["results"]:
            sys.exit(f"search answered {response.status_code}: {response.text[:200]}")

    def checked_get(which: GovernedStore, subject: str, predicate: str) -> None:
        if which.get(("memories", subject), predicate) is None:
            sys.exit(f"GovernedStore.get found nothing for {subject}/{predicate}")

    def store_search(which: GovernedStore, q: str) -> None:
        if not which.search(("memories",), query=q, limit=10):
            sys.exit("GovernedStore.search found nothing")

    for subject, predicate in keys[:50]:  # the answer cache warmed on a few keys, like a running server
        raw_get(subject, predicate)
    for i in range(warmup + iterations):
        subject, predicate = rng.choice(keys)
        runs: list[tuple[str, Callable[[], Any]]] = [
            ("raw get", partial(raw_get, subject, predicate)),
            ("GovernedStore.get", partial(checked_get, store, subject, predicate)),
            ("GovernedStore.get, register_loads=False", partial(checked_get, bare, subject, predicate)),
        ]
        if i % 2:
            runs.reverse()
        for name, fn in runs:
            timed(name, fn, i >= warmup)
    for i in range(warmup + max(1, iterations // 2)):
        q = f"{rng.choice(keys)[0]} {rng.choice(PREDICATES)}" if i % 2 else stores.words(rng, 3)
        runs = [
            ("raw search k=10", partial(raw_search, q)),
            ("GovernedStore.search k=10", partial(store_search, store, q)),
            ("GovernedStore.search, register_loads=False", partial(store_search, bare, q)),
        ]
        if i % 2:
            runs.reverse()
        for name, fn in runs:
            timed(name, fn, i >= warmup)
    raw.close()
    return samples


def report(samples: dict[str, list[float]]) -> None:
    print(f"\n{'round trip':<44} {'n':>5} {'median ms':>10} {'p95 ms':>8} {'ratio (median, p95)':>22}")
    pairs = {
        "GovernedStore.get": "raw get",
        "GovernedStore.get, register_loads=False": "raw get",
        "GovernedStore.search k=10": "raw search k=10",
        "GovernedStore.search, register_loads=False": "raw search k=10",
    }
    for name, values in samples.items():
        median, p95 = statistics.median(values), stores.percentile(values, 95)
        ratio = ""
        if name in pairs:
            base = samples[pairs[name]]
            ratio = f"{median / statistics.median(base):.2f}, {p95 / stores.percentile(base, 95):.2f}"
        print(f"{name:<44} {len(values):>5} {median:>10.2f} {p95:>8.2f} {ratio:>22}")
    print(
        "\nTarget: the wrapper adds <= 20% (ratio <= 1.20) over the API call it makes. GovernedStore.get and .search "
        "each make one call: the read with session_id, which also registers the context load that later brings "
        "notices; register_loads=False is the read without registering."
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="facts (and vector entries) seeded")
    parser.add_argument("--iterations", type=int, default=200, help="timed gets per path (searches: half)")
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"load average: {stores.load_average()}")
    workdir, _ = stores.configure_environment()
    import django

    django.setup()
    stores.prepare_database(fresh=False)
    token, _, keys = seed(args.records)
    with gunicorn(workdir) as base:
        print(f"Serving on {base} (gunicorn, 1 sync worker, DEBUG=0); {args.iterations} gets per path")
        samples = measure(base, token, keys, args.iterations, args.warmup)
    report(samples)


if __name__ == "__main__":
    main()
