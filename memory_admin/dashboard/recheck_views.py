"""Dashboard pages for canonical sources: field policies (admins), the overdue-rechecks queue,
"recheck now" and manual verification (owners). Each calls the same domain functions as the API."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.dashboard.forms import ManualVerifyForm, PolicyForm, SettingsTestForm, SourceTestForm
from memory_admin.dashboard.helpers import confirmed, fact_url, member_required, principal_of, redirect_back, safe_next
from memory_admin.lib import throttling
from memory_admin.memory import actions, rechecks
from memory_admin.memory.errors import DomainError, Forbidden, InvalidState
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.policies import (
    delete_field_policy,
    may_edit_policies,
    may_read_policies,
    policies_for,
    save_field_policy,
    validate_canonical_source,
)

Result = RecheckAttempt.Result
RESULT_WORDS = {
    Result.VERIFIED_UNCHANGED: "verified, unchanged",
    Result.VERIFIED_CHANGED: "verified, changed: the new value is now current",
    Result.SOURCE_UNAVAILABLE: "the canonical source could not be reached",
    Result.SOURCE_AMBIGUOUS: "the canonical source's answer was ambiguous",
    Result.NOT_CHECKED: "not checked",
}


# The "Test this source" form sits on the policy page beside the policy form; both have a `project_id`
# field, so its ids get their own prefix (the posted names stay the same).
TEST_FORM_IDS = "test_%s"


def _require_admin(request: HttpRequest) -> None:
    if not may_edit_policies(principal_of(request)):  # before showing a form; saving checks again
        raise Forbidden("Only admins manage field policies.")


def _policy(request: HttpRequest, policy_id: int) -> FieldPolicy:
    policy = (
        FieldPolicy.objects.filter(tenant_id=principal_of(request).tenant_id, pk=policy_id)
        .select_related("project")
        .first()
    )
    if policy is None:
        raise Http404("No such policy")
    return policy


@member_required
def policy_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    # Compliance staff read everything (policies included) and change nothing.
    if not may_read_policies(principal):
        raise Forbidden("Only admins manage field policies.")
    policies = (
        FieldPolicy.objects.filter(tenant_id=principal.tenant_id)
        .select_related("project")
        .order_by("predicate", "project__key")
    )
    return render(request, "dashboard/policies.html", {"policies": policies, "can_edit": may_edit_policies(principal)})


@member_required
def policy_edit(request: HttpRequest, policy_id: int | None = None) -> HttpResponse:
    """The policy form. Its buttons: "Save"; "Show its settings" (without JavaScript, after choosing another
    connector: the same form again, nothing saved); "Test these settings" (fetch one subject with the
    settings as typed, nothing saved)."""
    _require_admin(request)
    policy = _policy(request, policy_id) if policy_id else None
    try_form = SettingsTestForm(prefix="try")
    test_result: dict[str, Any] | None = None
    status = 200
    action = request.POST.get("action", "save")
    if request.method == "POST" and action == "show":
        form = PolicyForm(initial=request.POST.dict())
    elif request.method == "POST":
        form = PolicyForm(request.POST)
        if action == "test":
            try_form = SettingsTestForm(request.POST, prefix="try")
            test_result, status = _test_settings(request, form, try_form)
        elif form.is_valid():
            try:
                saved = save_field_policy(principal_of(request), form.to_policy_data(), instance=policy)
            except DomainError as exc:
                for field, problems in (exc.extra.get("errors") or {"__all__": [exc.detail]}).items():
                    if field == "canonical_source":
                        form.attach_source_problems(problems)
                    else:
                        form.add_error(None if field not in form.fields else field, " ".join(problems))
            else:
                messages.success(request, f"Policy for {saved.predicate} saved.")
                return redirect_back(request, reverse("dashboard:policy", args=[saved.pk]))
            status = 400
        else:
            status = 400
        form.describe_errors()
    else:
        form = PolicyForm(initial=PolicyForm.initial_for(policy) if policy else PolicyForm.initial_for_new())
    context = {
        "form": form,
        "policy": policy,
        "try_form": try_form,
        "test_result": test_result,
        "test_form": SourceTestForm(auto_id=TEST_FORM_IDS),
    }
    return render(request, "dashboard/policy_edit.html", context, status=status)


def _test_settings(
    request: HttpRequest, form: PolicyForm, try_form: SettingsTestForm
) -> tuple[dict[str, Any] | None, int]:
    """Fetch one subject with the settings as typed, through the same checks saving makes and the same
    `rechecks.test_source` the saved policy's test uses; nothing is stored."""
    if not form.is_valid() or not try_form.is_valid():
        return None, 400
    data = form.to_policy_data()
    if problems := validate_canonical_source(data["canonical_source"], principal_of(request).tenant_id):
        form.attach_source_problems(problems)
        return None, 400
    if data["canonical_source"] is None:
        form.add_error("connector", "Choose a canonical source to test.")
        return None, 400
    # The API's `source_test` budget (the server fetches a canonical source): the same throttles, one count.
    if (wait := throttling.throttle_wait(request, throttling.SOURCE_TEST)) is not None:
        words = f"Too many source tests; try again in {math.ceil(wait)} seconds. Nothing was fetched."
        return {"outcome": "throttled", "words": words, "detail": ""}, 429
    unsaved = FieldPolicy(
        tenant_id=principal_of(request).tenant_id,
        predicate=data["predicate"],
        canonical_source=data["canonical_source"],
        canonical_ref_prefix=data["canonical_ref_prefix"],
    )
    project = try_form.cleaned_data["project_id"] or data["project_id"] or ""
    result = rechecks.test_source(unsaved, try_form.cleaned_data["subject_id"], project)
    return _worded(result), 200


def _worded(result: dict[str, Any]) -> dict[str, Any]:
    """A test's result for the page: the outcome in words; values stay values (the page shows them)."""
    result["words"] = RESULT_WORDS.get(result["outcome"], result["detail"])
    return result


@member_required
@require_POST
def policy_delete(request: HttpRequest, policy_id: int) -> HttpResponse:
    """Delete a field policy after a confirmation page (no JavaScript needed)."""
    _require_admin(request)
    policy = _policy(request, policy_id)
    if not confirmed(request):
        context = {
            "title": f"Delete the policy for {policy.predicate}",
            "explanation": "The field loses its canonical source, authorized issuers and recheck policy: any writer's "
            "value is taken and nothing is rechecked until a new policy is saved. The deletion is audited.",
            "details": [
                ("Field", policy.predicate),
                ("Project", policy.project.key if policy.project else "every project"),
                ("Canonical source", (policy.canonical_source or {}).get("connector", "none")),
                ("Authorized issuers", ", ".join(policy.authorized_issuers) or "any writer"),
            ],
            "action": reverse("dashboard:policy_delete", args=[policy.pk]),
            "button": "Confirm: delete policy",
            "next": safe_next(request, reverse("dashboard:policy", args=[policy.pk])),
        }
        return render(request, "dashboard/confirm.html", context)
    delete_field_policy(principal_of(request), policy)
    messages.success(request, f"Policy for {policy.predicate} deleted.")
    return redirect_back(request, reverse("dashboard:policies"))


@member_required
@require_POST
def policy_test(request: HttpRequest, policy_id: int) -> HttpResponse:
    """ "Test this source": fetch one subject now and show what a recheck would conclude."""
    _require_admin(request)
    # The API's `source_test` budget (the server fetches a canonical source): the same throttles, one count.
    wait = throttling.throttle_wait(request, throttling.SOURCE_TEST)
    policy = _policy(request, policy_id)
    form = SourceTestForm(request.POST, auto_id=TEST_FORM_IDS)
    result: dict[str, Any] | None = None
    if wait is not None:
        seconds = math.ceil(wait)
        words = f"Too many source tests; try again in {seconds} seconds. Nothing was fetched."
        result = {"outcome": "throttled", "words": words, "detail": ""}
    elif form.is_valid():
        result = rechecks.test_source(policy, form.cleaned_data["subject_id"], form.cleaned_data["project_id"] or None)
        result = _worded(result)
    template = "dashboard/policy_edit.html#test" if request.headers.get("HX-Request") else "dashboard/policy_edit.html"
    context = {
        "form": PolicyForm(initial=PolicyForm.initial_for(policy)),
        "policy": policy,
        "test_form": form,
        "test_result": result,
        "saved_test": True,  # the result shows beside the saved source's test, not in the policy form
        "try_form": SettingsTestForm(prefix="try"),
    }
    if wait is not None:
        response = render(request, template, context, status=429)
        response["Retry-After"] = str(math.ceil(wait))
        return response
    return render(request, template, context, status=200 if form.is_valid() else 400)


@dataclass
class QueueRow:
    record: MemoryRecord
    risk: str
    fetchable: bool  # "Recheck now" only where the server can fetch the canonical source itself


@member_required
def recheck_queue(request: HttpRequest) -> HttpResponse:
    """Records past `recheck_after` or flagged for a person, by risk then age (or by age alone)."""
    principal = principal_of(request)
    now = timezone.now()
    records = list(
        # Today's value and a scheduled successor alike (the sweep's rule, `RecordQuerySet.kept_fresh`).
        MemoryRecord.objects.for_tenant(principal.tenant_pk)
        .kept_fresh(now)
        .filter(Q(recheck_after__lte=now) | ~Q(attention=""))
        .select_related("project")
        .order_by("recheck_after")[:300]
    )
    policies = policies_for(principal.tenant_pk, {(r.project.key, r.predicate) for r in records})
    rows = []
    for record in records:
        policy = policies[(record.project.key, record.predicate)]
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


@member_required
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
        messages.success(request, f"Recheck of {memory_id}: {words}.")
    else:
        messages.error(request, f"Recheck of {memory_id}: {words}. {attempt.error}")
    return redirect_back(request, fact_url(record))


@member_required
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
