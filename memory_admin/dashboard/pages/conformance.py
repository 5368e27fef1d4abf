"""The conformance page (admins and compliance): run the suite as a Celery task, follow its progress, and
read the latest scores side by side with the baseline; past runs are kept."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin.conformance import selectors
from memory_admin.conformance.models import ConformanceRun
from memory_admin.conformance.runner import DEFAULT_VARIANTS, grouped
from memory_admin.conformance.targets import problems, target_names
from memory_admin.conformance.tasks import run_conformance
from memory_admin.dashboard import nav
from memory_admin.dashboard.helpers import partial, principal_of
from memory_admin.dashboard.nav import page
from memory_admin.queueing import enqueue_after_commit

MAX_VARIANTS = 10
PAST_RUNS = 20


def _scoreboard(run: ConformanceRun | None) -> dict[str, Any] | None:
    """The finished run's counts as rows (one per count) and columns (one per target), failing names folded
    over variants ("case/probe", how many variants)."""
    if run is None or not run.result:
        return None
    result = run.result
    targets = result["targets"]
    rows = []
    for count in result["counts"]:
        cells = []
        for t in targets:
            slot = t["counts"][count["key"]]
            cells.append(
                {
                    "n": slot["n"],
                    "d": slot["d"],
                    "ok": not slot["failing"],
                    "failing": grouped(slot["failing"]),
                }
            )
        rows.append({"label": count["label"], "better": count["better"], "gate": count["gate"], "cells": cells})
    bases = sorted({c["base"] for c in result["cases"]})
    return {
        "targets": targets,
        "rows": rows,
        "cases": len(result["cases"]),
        "bases": bases,
        "skipped": list(result.get("skipped") or []),
    }


@page(nav.CONFORMANCE)
def conformance(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    chosen = request.GET.get("run", "")
    if chosen and not (chosen.isascii() and chosen.isdigit() and int(chosen) < 2**63):
        raise Http404("No such run")
    try:
        runs = selectors.runs_page(principal.tenant_pk, int(chosen) if chosen else None, past=PAST_RUNS)
    except selectors.NoSuchRun:
        raise Http404("No such run") from None
    latest = runs.latest
    context = {
        "latest": latest,
        "in_progress": latest is not None and not latest.finished,
        "shown": runs.shown,
        "board": _scoreboard(runs.shown),
        "past": runs.past,
        "variants": DEFAULT_VARIANTS,
        "max_variants": MAX_VARIANTS,
        "targets": target_names(),
        # Entry points of memory_governance.conformance_targets this process skipped, with their reasons.
        "problems": [str(p) for p in problems()],
    }
    response = render(request, partial(request, "dashboard/conformance.html", "progress"), context)
    if request.headers.get("HX-Request") and not context["in_progress"]:
        response["HX-Refresh"] = "true"  # the run being followed has finished: reload once to show its results
    return response


@page(nav.CONFORMANCE)
@require_POST
def conformance_start(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    raw = request.POST.get("variants", str(DEFAULT_VARIANTS)).strip()
    if not raw.isdigit() or not 0 <= int(raw) <= MAX_VARIANTS:
        messages.error(request, f"Variants must be a whole number from 0 to {MAX_VARIANTS}.")
        return HttpResponseRedirect(reverse("dashboard:conformance"))
    if selectors.run_under_way(principal.tenant_pk):
        messages.error(request, "A run is already under way; wait for it to finish.")
        return HttpResponseRedirect(reverse("dashboard:conformance"))
    run = ConformanceRun.objects.create(
        tenant_id=principal.tenant_pk, started_by=principal, targets=target_names(), variants=int(raw)
    )
    enqueue_after_commit(run_conformance, run.pk, principal.tenant_pk)
    messages.success(request, "The conformance suite is running; this page follows it.")
    return HttpResponseRedirect(reverse("dashboard:conformance"))
