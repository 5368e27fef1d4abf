"""The dashboard's records page against the Django admin changelist of the same table, and the overview.

Both are fetched with `django.test.Client` in process, signed in (`force_login`) as a human admin of
the bench tenant, so the figures are server time: middleware, session, queries and template rendering.
The overview (counts by status, freshness chart, overdue count: maintained counters, memory/stats.py) is
compared with counting the same figures from the records (`stats.exact_record_stats`), in the same run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from bench.measure import Figure, queries_per_call, sample_heads, timed

ADMIN_NAME = "bench-admin"
ADMIN_URL = "/admin/memory/memoryrecord/"
TARGET_PAGE_P95_MS = 30.0
TARGET_SPEEDUP = 20.0
TARGET_OVERVIEW_P95_MS = 100.0
EXACT_COUNT_RUNS = 3  # exact counts of the whole table: seconds each at 10M


@dataclass(frozen=True)
class Page:
    name: str
    urls: list[str]  # one per iteration (cycled), so a filter varies over random keys
    marker: bytes  # present in the body when the page lists rows
    note: str = ""
    short: str = ""  # how the ratio note names it


def bench_admin_principal(tenant_slug: str) -> Any:
    """A human admin of the bench tenant (staff, role admin): may use the dashboard and the Django admin."""
    from memory_admin.accounts.services import ensure_principal

    return ensure_principal(tenant_slug, ADMIN_NAME, ["admin", "owner"], password="x", validate=False)


def check_page(client: Any, page: Page) -> None:
    response = client.get(page.urls[0])
    if response.status_code != 200:
        sys.exit(f"GET {page.urls[0]} returned {response.status_code}: {response.content[:500]!r}")
    if page.marker not in response.content:
        sys.exit(f"GET {page.urls[0]} listed no records (no {page.marker!r} in the page)")


def bench_pages(tenant_slug: str, tenant_id: int, iterations: int, warmup: int, seed: int) -> list[Figure]:
    """Server time of the records page and the admin changelist, unfiltered and filtered, and their ratio."""
    from django.test import Client

    client = Client()
    client.force_login(bench_admin_principal(tenant_slug))
    keys = sample_heads(tenant_id, iterations + warmup, seed + 5)

    def records(**query: str) -> str:
        return f"/records/?{urlencode(query)}"

    row = b'<tr id="mem-'  # a row of the dashboard's records table
    admin_row = b'class="field-memory_id"'  # a row of the changelist
    dashboard = [
        Page("records page, first page (dashboard)", ["/records/"], row, "default view: accepted", "/records/"),
        Page(
            "records page, ?project&predicate (dashboard)",
            [records(project=k.project, predicate=k.predicate) for k in keys],
            row,
            "random keys",
        ),
        Page(
            "records page, ?status=all&subject (dashboard)",
            [records(status="all", subject=k.subject_id) for k in keys],
            row,
            "random subjects",
            "/records/?status=all&subject",
        ),
    ]
    admin = [
        Page("admin changelist, first page", [ADMIN_URL], admin_row),
        Page("admin changelist, ?status__exact=accepted", [f"{ADMIN_URL}?status__exact=accepted"], admin_row),
        Page(
            "admin changelist, ?q=<subject> (search)",
            [f"{ADMIN_URL}?{urlencode({'q': k.subject_id})}" for k in keys],
            admin_row,
            "random subjects",
        ),
    ]
    # Each admin page against the dashboard page that shows the same rows.
    counterpart = {admin[0].name: dashboard[0], admin[1].name: dashboard[0], admin[2].name: dashboard[2]}

    def getter(page: Page) -> Callable[[int], object]:
        return lambda i: client.get(page.urls[i % len(page.urls)])

    figures: dict[str, Figure] = {}
    for page in dashboard + admin:
        check_page(client, page)
        get = getter(page)
        queries = queries_per_call(lambda: get(0))  # noqa: B023 (called in this iteration)
        samples = timed(get, iterations, warmup)
        note = f"{queries} queries" + (f", {page.note}" if page.note else "")
        figure = Figure(page.name, samples, note=note)
        if page in dashboard:
            figure.target = f"p95 <= {TARGET_PAGE_P95_MS:g} ms"
            figure.met = figure.p95 <= TARGET_PAGE_P95_MS
        else:
            fast = figures[counterpart[page.name].name]
            by_median, by_p95 = figure.median / fast.median, figure.p95 / fast.p95
            figure.target = f">= {TARGET_SPEEDUP:g}x dashboard"
            figure.met = by_median >= TARGET_SPEEDUP
            figure.note = (
                f"{by_median:.1f}x slower than {counterpart[page.name].short} (median; p95 {by_p95:.1f}x); {note}"
            )
        figures[page.name] = figure
    return [*figures.values(), *bench_overview(client, tenant_id, iterations, warmup)]


def bench_overview(client: Any, tenant_id: int, iterations: int, warmup: int) -> list[Figure]:
    """The overview page (maintained counts) and, as the limit it is measured against, exact counting."""
    import os

    from django.utils import timezone

    from memory_admin.memory import stats

    overview = Page("overview page (dashboard)", ["/"], b'class="chart"')
    check_page(client, overview)
    queries = queries_per_call(lambda: client.get("/"))
    page = Figure(
        overview.name,
        timed(lambda _: client.get("/"), iterations, warmup),
        f"p95 <= {TARGET_OVERVIEW_P95_MS:g} ms",
        note=f"{queries} queries",
    )
    page.met = page.p95 <= TARGET_OVERVIEW_P95_MS
    counters = Figure("overview counts, maintained (stats.record_stats)", [])
    counters.samples_ms = timed(lambda _: stats.record_stats(tenant_id), iterations, warmup)
    load = os.getloadavg()[0]
    exact = Figure(
        "overview counts, exact (count the table)",
        timed(lambda _: stats.exact_record_stats(tenant_id, timezone.now()), EXACT_COUNT_RUNS, 1),
        note="the limit: what the page cost before",
    )
    now = timezone.now()
    same = stats.record_stats(tenant_id, now)
    truth = stats.exact_record_stats(tenant_id, now)
    agree = (same.by_status, same.freshness, same.overdue) == (truth.by_status, truth.freshness, truth.overdue)
    counters.note = (
        f"{exact.median / counters.median:,.0f}x faster than exact (median); "
        f"{'equal to' if agree else 'DIFFERENT FROM'} the exact figures; load {load:.2f}"
    )
    page.note += f"; {exact.median / page.median:,.0f}x faster than exact counting alone (median)"
    return [page, counters, exact]
