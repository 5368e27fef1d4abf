"""Compliance pages: deletion requests, the dry-run preview before filing, live per-store progress,
retry, and the deletion report (JSON and printable). Exports are downloaded here too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from django import forms
from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from deletion import certificates, selectors, service
from deletion.models import DeletionRequest, StoreProgress
from deletion.stores import STORES
from memory_admin.accounts.models import Principal
from memory_admin.dashboard import nav, wording
from memory_admin.dashboard.helpers import confirmed, principal_of, redirect_back, safe_next
from memory_admin.dashboard.nav import page
from memory_admin.dashboard.templatetags.dashboard import when
from memory_admin.derived import selectors as derived_selectors
from memory_admin.derived.exports import downloadable, export_project
from memory_admin.memory.errors import DomainError, Forbidden, NotFound


class DeletionForm(forms.Form):
    project_id = forms.CharField(max_length=100)
    scope_kind = forms.ChoiceField(choices=DeletionRequest.ScopeKind.choices)
    scope_value = forms.CharField(
        max_length=5000, help_text="A subject id, a predicate, or memory ids separated by commas"
    )
    reason = forms.CharField(max_length=5000, widget=forms.Textarea(attrs={"rows": 3}))
    due_by = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def scope(self) -> dict[str, Any]:
        kind, value = self.cleaned_data["scope_kind"], self.cleaned_data["scope_value"].strip()
        if kind == DeletionRequest.ScopeKind.MEMORY_IDS:
            return {kind: [v.strip() for v in value.split(",") if v.strip()]}
        return {kind: value}


def _days_left(due: date | None) -> int | None:
    from django.utils import timezone

    return (due - timezone.localdate()).days if due else None


def _due_words(request: DeletionRequest, days: int | None) -> str:
    """ "12 days left", "due today", "3 days late" against the request's deadline; "done" once purged."""
    if days is None:
        return ""
    if request.purge_confirmed_at is not None:
        return "done"
    if days == 0:
        return "due today"
    n = abs(days)
    return f"{n} day{'s' if n != 1 else ''} {'left' if days > 0 else 'late'}"


# --- Evidence as labelled fields --------------------------------------------------------------------------


def scope_words(request: DeletionRequest) -> str:
    """A deletion's scope in a few words, for a title or a message: "subject person-sato in project-a", "2
    records in project-a" (the page's Scope line, `_scope_words`, lists exactly what was filed)."""
    where = f"in {request.project.key}"
    if request.scope_kind == DeletionRequest.ScopeKind.MEMORY_IDS:
        count = len(request.scope_value or [])
        return f"{count} record{'' if count == 1 else 's'} {where}"
    kind = "subject" if request.scope_kind == DeletionRequest.ScopeKind.SUBJECT else "every fact of the field"
    return f"{kind} {request.scope_value} {where}"


def store_label(name: str) -> str:
    """How the page names a store: the label it registered with (deletion.stores.STORES), or its name in
    words for a row of a store no longer registered."""
    store = STORES.get(name)
    return store.label if store is not None and store.label else wording.label(name)


LIST_SHOWN = 12  # a longer list of ids shows its first entries and says how many more there are


@dataclass(frozen=True)
class EvidenceField:
    """One labelled piece of a store's evidence; the page shows `value` with `show_value` (never JSON)."""

    label: str
    value: Any
    more: int = 0  # entries of a long list not shown


def evidence_fields(evidence: Any, prefix: str = "") -> list[EvidenceField]:
    """A store's evidence (a JSON object) as labelled fields; nested objects become "Outer · inner" fields."""
    if not isinstance(evidence, dict):
        return [EvidenceField(prefix or "Evidence", evidence)]
    fields: list[EvidenceField] = []
    for key, value in evidence.items():
        label = f"{prefix} · {wording.label(key)}" if prefix else wording.label(key)
        if isinstance(value, dict) and value:
            fields += evidence_fields(value, label)
        elif isinstance(value, list) and len(value) > LIST_SHOWN:
            fields.append(EvidenceField(label, value[:LIST_SHOWN], more=len(value) - LIST_SHOWN))
        else:
            fields.append(EvidenceField(label, value))
    return fields


@dataclass(frozen=True)
class StoreView:
    progress: StoreProgress
    name: str
    evidence: list[EvidenceField]


def _store_views(deletion: DeletionRequest) -> list[StoreView]:
    return [
        StoreView(progress=p, name=store_label(p.store), evidence=evidence_fields(p.evidence))
        for p in deletion.stores.order_by("id")
    ]


def _scope_words(deletion: DeletionRequest) -> str:
    value = deletion.scope_value
    shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{deletion.get_scope_kind_display()}: {shown}"


def _detail_context(principal: Principal, deletion: DeletionRequest) -> dict[str, Any]:
    stores = _store_views(deletion)
    failed = [s for s in stores if s.progress.state == StoreProgress.State.FAILED]
    return {
        "deletion": deletion,
        "scope": _scope_words(deletion),
        # The page's title: the deletion by what it covers (its id is a copyable detail).
        "title": scope_words(deletion),
        "stores": stores,
        "failed": failed,
        "report": service.report(deletion),
        # What the page offers comes from the rules the actions enforce (service.may_act, can_retry); "retry"
        # is offered where a store failed (pending and waiting stores need no person to act).
        "can_act": service.may_act(principal),
        "can_retry": service.can_retry(deletion) and bool(failed),
        # The signed certificate: compliance staff, once the purge is confirmed (deletion.certificates).
        "can_certify": certificates.may_read_certificate(principal)
        and deletion.state == DeletionRequest.State.PURGE_CONFIRMED,
        "in_progress": deletion.purge_confirmed_at is None
        and deletion.state not in (DeletionRequest.State.CANCELLED, DeletionRequest.State.AWAITING_APPROVAL),
    }


@page(nav.DELETIONS)
def request_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)  # nav.DELETIONS: the roles service.may_read lets follow requests
    rows = [
        {
            "request": r,
            "scope": _scope_words(r),
            "report": service.report(r),
            "days_left": (days := _days_left(r.due_by)),
            "due_words": _due_words(r, days),
        }
        for r in selectors.with_stores(service.visible_requests(principal), limit=200)
    ]
    return render(request, "dashboard/deletions.html", {"rows": rows, "can_file": service.may_act(principal)})


@page(nav.DELETIONS)
def request_new(request: HttpRequest) -> HttpResponse:
    """The form, then a dry-run preview of what each store would touch, then filing on confirmation.

    After the preview the scope is shown read-only and the confirmation carries the preview's signed id:
    filing refuses a scope or project other than the previewed one ("Edit scope" goes back to the form).
    """
    principal = principal_of(request)
    if not service.may_act(principal):  # checked again when filing; here so the form is not shown
        raise Forbidden("Only compliance staff file deletion requests.")
    form = DeletionForm(request.POST or None, initial=request.GET.dict())
    preview: dict[str, dict[str, Any]] | None = None
    preview_id = ""
    status = 200
    if request.method == "POST" and request.POST.get("edit") == "yes":
        pass  # back to the editable form, with the values as posted
    elif request.method == "POST" and form.is_valid():
        try:
            if request.POST.get("confirm") == "yes":
                return _file_previewed(request, form)
            result = service.request_deletion(
                principal,
                project_id=form.cleaned_data["project_id"],
                scope=form.scope(),
                reason=form.cleaned_data["reason"],
                due_by=form.cleaned_data["due_by"],
                dry_run=True,
            )
        except DomainError as exc:
            form.add_error(
                None, exc.detail + " " + " ".join(m for ms in (exc.extra.get("errors") or {}).values() for m in ms)
            )
            status = exc.status
        else:
            if isinstance(result, service.Preview):
                preview, preview_id = result.stores, result.preview_id
    elif request.method == "POST":
        status = 400
    previewed = []
    if preview is not None:
        data = form.cleaned_data
        kinds = dict(DeletionRequest.ScopeKind.choices)
        previewed = [
            ("Project", data["project_id"]),
            ("Scope", f"{kinds[data['scope_kind']]}: {data['scope_value']}"),
            ("Reason", data["reason"]),
            ("Due by", data["due_by"]),
        ]
    context = {
        "form": form,
        "preview": preview,
        "preview_rows": [(store_label(name), store) for name, store in (preview or {}).items()],
        "preview_id": preview_id,
        "previewed": previewed,
    }
    return render(request, "dashboard/deletion_new.html", context, status=status)


def _file_previewed(request: HttpRequest, form: DeletionForm) -> HttpResponse:
    """File what the cited preview covered; a missing preview id is refused like a mismatched one."""
    cited = request.POST.get("preview_id", "")
    if not cited:
        raise service.PreviewInvalid(
            "Preview the request first: only a previewed scope can be filed.", code_override="preview_required"
        )
    data = form.cleaned_data
    filed, drift = service.file_previewed(
        principal_of(request),
        preview_id=cited,
        project_id=data["project_id"],
        scope=form.scope(),
        reason=data["reason"],
        due_by=data["due_by"],
    )
    messages.success(request, f"Deletion filed for {scope_words(filed)}; its progress is below.")
    if filed.reason_redacted:
        messages.info(
            request,
            "The reason quoted values being deleted; they were replaced by [redacted] before it was kept.",
        )
    if drift.changed:
        messages.warning(
            request,
            f"The stores changed between the preview and filing: {drift.describe()}. "
            "The request covers the scope as it is now.",
        )
    return redirect_back(request, reverse("dashboard:deletion", args=[filed.public_id]))


def _request_or_404(principal: Principal, public_id: str) -> DeletionRequest:
    """The request, or the product's 404 in words (the domain's message names the id, which is for the API)."""
    try:
        return service.get_request(principal, public_id)
    except NotFound:
        raise Http404("No such deletion request, or it is not yours to follow.") from None


@page(nav.DELETIONS)
def request_detail(request: HttpRequest, public_id: str) -> HttpResponse:
    principal = principal_of(request)
    deletion = _request_or_404(principal, public_id)
    context = _detail_context(principal, deletion)
    template = "dashboard/deletion.html#progress" if request.headers.get("HX-Request") else "dashboard/deletion.html"
    return render(request, template, context)


@page(nav.DELETIONS)
def request_report(request: HttpRequest, public_id: str) -> HttpResponse:
    """The deletion report: JSON to file with a regulator, or a printable page."""
    principal = principal_of(request)
    deletion = _request_or_404(principal, public_id)
    if request.GET.get("format") == "json":
        report = service.report(deletion)
        response = JsonResponse(report, json_dumps_params={"indent": 2, "ensure_ascii": False})
        response["Content-Disposition"] = f'attachment; filename="{deletion.public_id}.json"'
        return response
    context = _detail_context(principal, deletion)
    if context["can_certify"]:
        # The printable report names the certificate it matches: its key and signature (the same document as
        # the download: built from the same rows, and Ed25519 signs deterministically).
        context["certificate"] = certificates.certificate(principal, deletion.public_id)
    return render(request, "dashboard/deletion_report.html", context)


@page(nav.DELETIONS)
def request_certificate(request: HttpRequest, public_id: str) -> HttpResponse:
    """The signed deletion certificate as a JSON file (compliance staff, once the purge is confirmed)."""
    principal = principal_of(request)
    try:
        certificate = certificates.certificate(principal, public_id)
    except certificates.CertificateNotReady as exc:
        messages.error(request, exc.detail)
        return redirect_back(request, reverse("dashboard:deletion", args=[public_id]))
    response = JsonResponse(certificate, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="{public_id}-certificate.json"'
    return response


@page(nav.DELETIONS)
@require_POST
def request_action(request: HttpRequest, public_id: str, verb: str) -> HttpResponse:
    if verb not in ("approve", "cancel", "retry"):
        raise Http404("No such action")
    principal = principal_of(request)
    back = reverse("dashboard:deletion", args=[public_id])
    try:
        if verb == "approve":
            service.approve(principal, public_id)
        elif verb == "cancel":
            service.cancel(principal, public_id, request.POST.get("reason", ""))
        elif verb == "retry":
            service.retry_stores(principal, public_id)
    except (Forbidden, NotFound):
        raise  # another tenant's or an unknown request is a 404, not a redirect with a message
    except DomainError as exc:
        messages.error(request, exc.detail)
        return redirect_back(request, back)
    messages.success(request, {"approve": "Approved.", "cancel": "Cancelled.", "retry": "Requeued."}.get(verb, "Done."))
    return redirect_back(request, back)


@page(nav.EXPORTS)
def exports(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    if request.method == "POST":
        try:
            made = export_project(principal, request.POST.get("project_id", "").strip())
        except Forbidden:
            raise
        except DomainError as exc:
            messages.error(request, exc.detail)
        else:
            messages.success(request, f"Exported {made.rows} records.")
        return redirect_back(request, reverse("dashboard:exports"))
    files = derived_selectors.export_files(principal.tenant_pk, limit=100)
    return render(request, "dashboard/exports.html", {"files": files})


@page(nav.EXPORTS)
def export_download(request: HttpRequest, export_id: int) -> HttpResponseBase:
    export = downloadable(principal_of(request), export_id)
    return FileResponse(open(export.path, "rb"), as_attachment=True, filename=f"{export.project.key}-{export.pk}.jsonl")


# --- Lifting a tombstone ------------------------------------------------------------------------


@page(nav.DELETIONS)
@require_POST
def tombstone_lift(request: HttpRequest, tombstone_id: int) -> HttpResponse:
    """An owner lets a deleted item be written again: a confirmation page with a reason first (no JavaScript
    needed), then service.lift_tombstone, which decides who may and audits it (`tombstone.lifted`)."""
    principal = principal_of(request)
    if not service.may_lift_tombstones(principal):  # before the confirmation page; the service checks again
        raise Forbidden("Only an owner can lift a tombstone.")
    stone = selectors.tombstone(principal, tombstone_id)
    if stone is None:
        raise Http404("No such tombstone.")
    back = safe_next(request, reverse("dashboard:deletions"))
    reason = request.POST.get("reason", "").strip()
    if not confirmed(request) or not reason:
        if confirmed(request):
            messages.error(request, "Give a reason; it is audited. Nothing was changed.")
        context = {
            "title": f"Lift the tombstone of {stone.get_kind_display().lower()} {stone.memory_id}".rstrip(),
            "explanation": "Writes that would bring the deleted content back are then accepted again. The "
            "deleted content itself does not come back; it is gone.",
            "details": [
                ("Deleted by", stone.request_public_id or "(restored from the deletion ledger)"),
                ("Deleted on", when(stone.created_at)),
            ],
            "action": reverse("dashboard:tombstone_lift", args=[stone.pk]),
            "ask_reason": True,
            "reason": reason,
            "button": "Confirm: lift the tombstone",
            "next": back,
        }
        return render(request, "dashboard/confirm.html", context, status=400 if confirmed(request) else 200)
    try:
        service.lift_tombstone(principal, stone.pk, reason)
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.detail}")
        return redirect_back(request, back)
    messages.success(request, "Tombstone lifted: the item may be written again.")
    return redirect_back(request, back)
