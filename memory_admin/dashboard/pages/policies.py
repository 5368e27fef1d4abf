"""Field policies: the list (admins and compliance staff, who only read), the policy form with "Test these
settings", "Test this source" and deleting a policy (admins). Each calls the same domain functions as the API."""

from __future__ import annotations

import math
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin.dashboard import nav
from memory_admin.dashboard.forms import PolicyForm, SettingsTestForm, SourceTestForm
from memory_admin.dashboard.helpers import confirmed, principal_of, redirect_back, safe_next
from memory_admin.dashboard.nav import page
from memory_admin.dashboard.pages.rechecks import RESULT_WORDS
from memory_admin.lib import throttling
from memory_admin.memory import rechecks, selectors
from memory_admin.memory.errors import DomainError, Forbidden
from memory_admin.memory.models import FieldPolicy
from memory_admin.memory.policies import (
    delete_field_policy,
    may_edit_policies,
    save_field_policy,
    validate_canonical_source,
)

# The "Test this source" form sits on the policy page beside the policy form; both have a `project_id`
# field, so its ids get their own prefix (the posted names stay the same).
TEST_FORM_IDS = "test_%s"


def _require_admin(request: HttpRequest) -> None:
    if not may_edit_policies(principal_of(request)):  # before showing a form; saving checks again
        raise Forbidden("Only admins manage field policies.")


def _policy(request: HttpRequest, policy_id: int) -> FieldPolicy:
    policy = selectors.field_policy(principal_of(request).tenant_pk, policy_id)
    if policy is None:
        raise Http404("No such policy")
    return policy


@page(nav.POLICIES)
def policy_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    # Compliance staff read everything (policies included) and change nothing (nav.POLICIES lets them in).
    policies = selectors.field_policies(principal.tenant_pk)
    return render(request, "dashboard/policies.html", {"policies": policies, "can_edit": may_edit_policies(principal)})


@page(nav.POLICIES)
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
            if request.headers.get("HX-Request"):
                # htmx swaps only the result (it does not swap a 4xx answer): the result says what is wrong.
                context = {"form": form, "try_form": try_form, "test_result": test_result}
                return render(request, "dashboard/policy_edit.html#settings-test", context)
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


def _test_settings(request: HttpRequest, form: PolicyForm, try_form: SettingsTestForm) -> tuple[dict[str, Any], int]:
    """Fetch one subject with the settings as typed, through the same checks saving makes and the same
    `rechecks.test_source` the saved policy's test uses; nothing is stored. Settings that would not save are
    not tested: the result says why (and each problem shows beside its field)."""
    if not form.is_valid() or not try_form.is_valid():
        return _not_tested(form, try_form), 400
    data = form.to_policy_data()
    if problems := validate_canonical_source(data["canonical_source"], principal_of(request).tenant_id):
        form.attach_source_problems(problems)
        return _not_tested(form, try_form), 400
    if data["canonical_source"] is None:
        form.add_error("connector", "Choose a canonical source to test.")
        return _not_tested(form, try_form), 400
    # The API's `source_test` budget (the server fetches a canonical source): the same throttles, one count.
    if (wait := throttling.throttle_wait(request, throttling.SOURCE_TEST)) is not None:
        words = f"Too many source tests; try again in {math.ceil(wait)} seconds. Nothing was fetched."
        return {"outcome": "throttled", "words": words, "detail": ""}, 429
    unsaved = FieldPolicy(
        tenant_id=principal_of(request).tenant_pk,
        predicate=data["predicate"],
        canonical_source=data["canonical_source"],
        canonical_ref_prefix=data["canonical_ref_prefix"],
    )
    project = try_form.cleaned_data["project_id"] or data["project_id"] or ""
    result = rechecks.test_source(unsaved, try_form.cleaned_data["subject_id"], project)
    return _worded(result), 200


def _not_tested(form: PolicyForm, try_form: SettingsTestForm) -> dict[str, Any]:
    """Why nothing was fetched: every problem of the settings as typed, in the form's words."""
    problems = [
        f"{form[name].label if name in form.fields else ''}: {' '.join(map(str, errors))}".lstrip(": ")
        for name, errors in form.errors.items()
    ]
    problems += [f"{try_form[name].label}: {' '.join(map(str, errors))}" for name, errors in try_form.errors.items()]
    return {"outcome": "not_tested", "words": "not tested: nothing was fetched", "problems": problems, "detail": ""}


def _worded(result: dict[str, Any]) -> dict[str, Any]:
    """A test's result for the page: the outcome in words; values stay values (the page shows them)."""
    result["words"] = RESULT_WORDS.get(result["outcome"], result["detail"])
    return result


@page(nav.POLICIES)
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


@page(nav.POLICIES)
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
