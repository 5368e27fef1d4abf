"""Measurement helpers shared by the benchmarks of bench/run.py, bench/pages.py and bench/rechecks.py."""

from __future__ import annotations

import math
import os
import queue
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Figure:
    """One row of the report: timed samples (milliseconds), the target and whether it was met.

    A figure without samples (a throughput run) prints "-" for median and p95 and says it in `note`.
    """

    name: str
    samples_ms: list[float]
    target: str = ""
    met: bool | None = None
    note: str = ""
    count: int | None = None  # the n column when it is not the number of samples
    # 1-minute load average when the figure was made (right after its samples): the machine is shared.
    load: float = field(default_factory=lambda: os.getloadavg()[0])

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms) if self.samples_ms else math.nan

    @property
    def p95(self) -> float:
        return percentile(self.samples_ms, 95) if self.samples_ms else math.nan


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def timed(fn: Callable[[int], object], iterations: int, warmup: int) -> list[float]:
    """Milliseconds per call of fn(i), after `warmup` untimed calls."""
    for i in range(warmup):
        fn(-1 - i)
    samples = []
    for i in range(iterations):
        t0 = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


def alternating(
    a: Callable[[int], object], b: Callable[[int], object], iterations: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per call of a(i) and of b(i), timed in turns (a then b, then b then a, ...) after `warmup`
    untimed pairs: a ratio of the two medians compares them under the same load of a shared machine, which two
    runs one after the other do not."""
    for i in range(warmup):
        a(-1 - i)
        b(-1 - i)
    first: list[float] = []
    second: list[float] = []
    for i in range(iterations):
        order = ((a, first), (b, second)) if i % 2 == 0 else ((b, second), (a, first))
        for fn, samples in order:
            t0 = time.perf_counter()
            fn(i)
            samples.append((time.perf_counter() - t0) * 1000)
    return first, second


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def print_table(figures: list[Figure]) -> None:
    header = f"{'benchmark':<46} {'n':>5} {'median ms':>10} {'p95 ms':>8}  {'target':<22} {'met':<4} {'load':>5} note"
    print(header)
    print("-" * len(header))
    for f in figures:
        met = "" if f.met is None else ("yes" if f.met else "NO")
        print(
            f"{f.name:<46} {len(f.samples_ms) if f.count is None else f.count:>5} {ms(f.median):>10} {ms(f.p95):>8}  {f.target:<22} {met:<4} {f.load:>5.2f} {f.note}"
        )


@dataclass(frozen=True)
class Head:
    project: str
    subject_id: str
    predicate: str
    revision: int
    source_ref: str
    source_revision: str


def sample_heads(tenant_id: int, n: int, seed: int) -> list[Head]:
    """n distinct random fact keys of the tenant with their current head (as a client would read it)."""
    from django.db import connection

    from memory_admin.lib import sealing

    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(%s)", [(seed % 1000) / 1000])
        cursor.execute(
            """
            SELECT p.key, r.subject_id, r.predicate, r.revision, r.source_canonical_ref, r.source_revision
            FROM memory_memoryrecord r JOIN memory_project p ON p.id = r.project_id
            WHERE r.tenant_id = %s AND r.is_head
            ORDER BY random() LIMIT %s
            """,
            [tenant_id, n],
        )
        rows = cursor.fetchall()
    # The ref is stored sealed (lib.sealing): opened, as the model field's reads do.
    return [
        Head(project, subject, predicate, revision, sealing.open_text(ref, "record.source_ref"), source_revision)
        for project, subject, predicate, revision, ref, source_revision in rows
    ]


def check_response(response: Any, expect_results: bool = True) -> None:
    if response.status_code != 200:
        sys.exit(f"GET returned {response.status_code}: {response.content[:500]!r}")
    if expect_results and not response.json()["results"]:
        sys.exit("GET returned an empty page")


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def queries_per_call(fn: Callable[[], object]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


def collect_runs(workers: list[Any], results: Any, what: str) -> list[Any]:
    """Start the worker processes and gather one result from each off `results`; if one dies first, kill
    them all and exit naming the exit codes (`what` names the processes in that message)."""
    for worker in workers:
        worker.start()
    runs: list[Any] = []
    while len(runs) < len(workers):
        try:
            runs.append(results.get(timeout=1))
        except queue.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed:
                for worker in workers:
                    worker.kill()
                sys.exit(f"A {what} process failed (exit codes {failed}); see its traceback above.")
    for worker in workers:
        worker.join()
    return runs


def statement_mode() -> str:
    """How this run sends SQL to PostgreSQL (settings: DB_SERVER_SIDE_BINDING, DB_PREPARE_THRESHOLD), for the
    report's header: prepared statements change what a write or a read costs, on both sides of the wire."""
    from django.conf import settings

    options = settings.DATABASES["default"].get("OPTIONS", {})
    if not options.get("server_side_binding"):
        return "SQL sent with values merged in (client-side binding, Django's default; see docs/deploying.md)"
    threshold = options.get("prepare_threshold")
    if threshold is None:
        return "server-side binding (DB_SERVER_SIDE_BINDING=1), no statement prepared"
    return f"server-side binding, statements prepared after {threshold} runs (DB_PREPARE_THRESHOLD={threshold})"
