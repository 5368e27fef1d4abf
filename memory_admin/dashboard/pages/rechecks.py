"""Rechecks: the overdue-rechecks queue, "recheck now" and manual verification (owners and admins). Each
calls the same domain functions as the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.dashboard import nav
from memory_admin.dashboard.forms import ManualVerifyForm
from memory_admin.dashboard.helpers import fact_url, principal_of, redirect_back
from memory_admin.dashboard.nav import page
from memory_admin.memory import actions, rechecks, selectors
from memory_admin.memory.errors import DomainError, Forbidden, InvalidState
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt

Result = RecheckAttempt.Result
RESULT_WORDS = {
    Result.VERIFIED_UNCHANGED: "verified, unchanged",
    Result.VERIFIED_CHANGED: "verified, changed: the new value is now current",
    Result.SOURCE_UNAVAILABLE: "the canonical source could not be reached",
    Result.SOURCE_AMBIGUOUS: "the canonical source's answer was ambiguous",
    Result.NOT_CHECKED: "not checked",
}


@dataclass
class QueueRow:
    record: MemoryRecord
    risk: str
    fetchable: bool  # "Recheck now" only where the server can fetch the canonical source itself


@page(nav.RECHECKS)
def recheck_queue(request: HttpRequest) -> HttpResponse:
    """Records past `recheck_after` or flagged for a person, by risk then age (or by age alone)."""
    principal = principal_of(request)
    now = timezone.now()
    rows = []
    for record, policy in selectors.recheck_queue(principal.tenant_pk, now, limit=300):
        rows.append(
            QueueRow(
                record=record,
                risk=policy.risk if policy else FieldPolicy.Risk.LOW,
                fetchable=rechecks.can_fetch(policy),
            )
        )
    sort = request.GET.get("sort", "risk")
    if sort == "age":
        rows.sort(key=lambda row: row.record.recheck_after or now)
    else:
        rows.sort(key=lambda row: (row.risk != FieldPolicy.Risk.HIGH, row.record.recheck_after or now))
    return render(request, "dashboard/rechecks.html", {"rows": rows, "sort": sort, "can_curate": principal.can_curate})


@page(nav.RECHECKS)
@require_POST
def recheck(request: HttpRequest, memory_id: str) -> HttpResponse:
    """ "Recheck now": fetch from the canonical source synchronously, bounded by its timeout."""
    principal = principal_of(request)
    if not principal.can_curate:  # before reading the record, so a reader learns nothing; the domain checks again
        raise Forbidden("Only owners and admins start rechecks.")
    record = actions.get_record(principal, memory_id)
    try:
        attempt = rechecks.request_recheck_now(principal, record, trigger=RecheckAttempt.Trigger.DASHBOARD)
    except InvalidState as exc:
        messages.error(request, exc.detail)
        return redirect_back(request, fact_url(record))
    words = RESULT_WORDS[Result(attempt.outcome)]
    if attempt.verified:
        messages.success(request, f"Recheck of {record.subject_id} · {record.predicate}: {words}.")
    else:
        messages.error(request, f"Recheck of {record.subject_id} · {record.predicate}: {words}. {attempt.error}")
    return redirect_back(request, fact_url(record))


@page(nav.RECHECKS)
@require_POST
def manual_verify(request: HttpRequest, memory_id: str) -> HttpResponse:
    """A person verifies a manual field: still true, changed to a new value, or cannot tell."""
    principal = principal_of(request)
    record = actions.get_record(principal, memory_id)
    form = ManualVerifyForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose still true, changed, or cannot tell.")
        return redirect_back(request, fact_url(record))
    verdict = form.cleaned_data["verdict"]
    observed: Any = None
    if verdict == "changed":
        text = form.cleaned_data["new_value"].strip()
        if not text:
            messages.error(request, "Give the new value. Nothing was changed.")
            return redirect_back(request, fact_url(record))
        try:
            observed = json.loads(text)
        except ValueError:
            observed = text  # plain text values need no quotes
    outcome = {
        "still_true": Result.VERIFIED_UNCHANGED,
        "changed": Result.VERIFIED_CHANGED,
        "cannot_tell": Result.SOURCE_AMBIGUOUS,
    }[verdict]
    try:
        # Refused unless a person verifies this field (policies.is_manual), then as any report.
        attempt = rechecks.report_manual_verification(
            principal,
            record,
            outcome=outcome,
            observed_value=observed if verdict == "changed" else None,
            source_revision=form.cleaned_data["source_revision"] or timezone.now().isoformat(),
            error=form.cleaned_data["note"] if verdict == "cannot_tell" else "",
        )
    except DomainError as exc:
        messages.error(request, f"Not recorded: {exc.detail}")
        return redirect_back(request, fact_url(record))
    messages.success(request, f"Recorded: {RESULT_WORDS[Result(attempt.outcome)]}.")
    return redirect_back(request, fact_url(record))
