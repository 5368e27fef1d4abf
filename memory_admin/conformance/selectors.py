"""Reads of conformance runs that the conformance page shows; they only read."""

from __future__ import annotations

from dataclasses import dataclass

from memory_admin.conformance.models import ConformanceRun


@dataclass
class RunsPage:
    latest: ConformanceRun | None  # the newest run, finished or not
    shown: ConformanceRun | None  # the run asked for, else the newest with results
    past: list[ConformanceRun]


class NoSuchRun(LookupError):
    pass


def runs_page(tenant_id: int, chosen: int | None, *, past: int = 20) -> RunsPage:
    """The runs the page shows: three queries. `chosen` names a run of the tenant (NoSuchRun otherwise)."""
    runs = ConformanceRun.objects.for_tenant(tenant_id).select_related("started_by")
    recent = list(runs.order_by("-id")[:past])
    latest = recent[0] if recent else None
    shown = runs.filter(pk=chosen).first() if chosen is not None else runs.exclude(result=None).order_by("-id").first()
    if chosen is not None and shown is None:
        raise NoSuchRun(chosen)
    return RunsPage(latest, shown, recent)


def run_under_way(tenant_id: int) -> bool:
    return (
        ConformanceRun.objects.for_tenant(tenant_id)
        .filter(status__in=[ConformanceRun.Status.QUEUED, ConformanceRun.Status.RUNNING])
        .exists()
    )
