"""Dashboard pages. Each view parses input, calls the domain (actions/reads), and renders.

One view serves a page and its htmx fragment (`template#partial`), so every page also works without
JavaScript.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.db.models import Count, Q, TextField
from django.db.models.functions import Cast
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from deletion import service as deletion_service
from deletion import tombstones
from deletion.models import Tombstone
from memory_admin.accounts.models import Principal
from memory_admin.dashboard.forms import (
    AsOfForm,
    AuditCursorField,
    AuditFilterForm,
    BulkForm,
    ReasonForm,
    RecordFilterForm,
    ResolveForm,
)
from memory_admin.dashboard.helpers import (
    PAGE_SIZE,
    confirmed,
    fact_url,
    keyset_page,
    member_required,
    partial,
    principal_of,
    redirect_back,
    safe_next,
)
from memory_admin.derived.dependants import dependants_of
from memory_admin.memory import actions, reads, rechecks, task_failures
from memory_admin.memory.errors import DomainError, Forbidden, NotFound
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord, RecheckAttempt
from memory_admin.memory.policies import is_manual, policy_for

Status = MemoryRecord.Status
# Audit events are shown by the time they happened (`at`, which a domain action may set to its own `now`),
# not by insertion; the id breaks ties. The audit page's keyset cursor follows the same order.
AUDIT_ORDER = ("-at", "-id")

# The four operations of PRODUCT.md rule 2, each with when it fits.
OPERATIONS = [
    ("exclude", "Exclude from context", "The record is wrong or must not reach an agent, but is kept for the record."),
    (
        "expire",
        "Expire, keep as history",
        "The fact stopped holding and nothing replaces it; history still answers as-of questions.",
    ),
    (
        "recheck",
        "Recheck now",
        "The value may have changed at its canonical source; fetch it again and keep what it says.",
    ),
    ("delete", "Request deletion", "The content must not be kept at all, in any store; compliance staff file it."),
]


# --- Overview ---------------------------------------------------------------------------------


@member_required
def overview(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    now = timezone.now()
    records = MemoryRecord.objects.for_tenant(principal.tenant_pk)
    by_status = dict(records.values_list("status").annotate(n=Count("id")).order_by())
    accepted = records.filter(status=Status.ACCEPTED)
    buckets = accepted.aggregate(
        day=Count("id", filter=Q(last_verified_at__gte=now - timedelta(days=1))),
        week=Count(
            "id", filter=Q(last_verified_at__lt=now - timedelta(days=1), last_verified_at__gte=now - timedelta(days=7))
        ),
        month=Count(
            "id", filter=Q(last_verified_at__lt=now - timedelta(days=7), last_verified_at__gte=now - timedelta(days=30))
        ),
        older=Count("id", filter=Q(last_verified_at__lt=now - timedelta(days=30))),
        never=Count("id", filter=Q(last_verified_at__isnull=True)),
        overdue=Count("id", filter=Q(recheck_after__lte=now)),
    )
    chart = [
        ("verified < 1 day ago", buckets["day"]),
        ("1-7 days", buckets["week"]),
        ("7-30 days", buckets["month"]),
        ("> 30 days", buckets["older"]),
        ("never verified", buckets["never"]),
    ]
    peak = max([n for _, n in chart] + [1])
    context = {
        # Deleted records leave no row once purged: their tombstones are what count (and the tile links to
        # the deletion requests, where each one is followed).
        "counts": [(status, by_status.get(status, 0)) for status in Status.values if status != Status.DELETED],
        "deleted": Tombstone.objects.filter(
            tenant_id=principal.tenant_id, kind=Tombstone.Kind.RECORD, lifted_at__isnull=True
        ).count(),
        "open_disputes": Dispute.objects.filter(tenant_id=principal.tenant_id, status=Dispute.Status.OPEN).count(),
        "overdue": buckets["overdue"],
        "chart": [(label, n, round(300 * n / peak)) for label, n in chart],
        "recent": AuditEvent.objects.filter(tenant_id=principal.tenant_id).order_by(*AUDIT_ORDER)[:12],
        # Rows a background task had to skip: owners and admins fix or exclude them.
        "task_failures": (
            task_failures.recent_failures(principal.tenant_pk)[:20] if principal.has_role("owner", "admin") else []
        ),
    }
    return render(request, "dashboard/overview.html", context)


# --- Records ----------------------------------------------------------------------------------


def _filtered_records(principal: Principal, data: dict[str, Any]) -> Any:
    records = MemoryRecord.objects.for_tenant(principal.tenant_pk)
    status = data.get("status") or Status.ACCEPTED
    if status != "all":
        records = records.filter(status=status)
    if data.get("project"):
        records = records.filter(project__key=data["project"])
    if data.get("subject"):
        records = records.filter(subject_id=data["subject"])
    if data.get("predicate"):
        records = records.filter(predicate=data["predicate"])
    if data.get("source"):
        records = records.filter(source_canonical_ref__startswith=data["source"])
    if data.get("freshness"):
        # The same rule the API's reads answer with (reads.freshness_of), as a query.
        records = records.filter(reads.freshness_filter(data["freshness"], timezone.now()))
    if data.get("q"):
        q = data["q"]
        records = records.annotate(value_text=Cast("value", TextField())).filter(
            Q(subject_id__icontains=q) | Q(predicate__icontains=q) | Q(value_text__icontains=q)
        )
    return records


@member_required
def record_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    form = RecordFilterForm(request.GET)
    rows: list[MemoryRecord] = []
    next_after = None
    if form.is_valid():
        data = form.cleaned_data
        records = _filtered_records(principal, data).select_related("project", "issuer")
        after = Q(id__lt=data["after"]) if data.get("after") else None
        rows, last = keyset_page(records, order=("-id",), after=after, size=data.get("size") or PAGE_SIZE)
        next_after = last.pk if last else None
    context = {
        "form": form,
        "rows": rows,
        "next_after": next_after,
        "status_view": form.cleaned_data.get("status") if form.is_valid() else "accepted",
        "can_curate": principal.can_curate,
    }
    return render(request, partial(request, "dashboard/records.html", "table"), context)


@member_required
@require_POST
def bulk_records(request: HttpRequest) -> HttpResponse:
    """Exclude or expire several records: confirm first, then apply all or none."""
    principal = principal_of(request)
    if not principal.can_curate:
        raise Forbidden("Only owners and admins may exclude or expire records.")
    form = BulkForm(request.POST)
    ids = [i for i in request.POST.getlist("ids") if i]
    back = safe_next(request, reverse("dashboard:records"))
    if not ids or not form.is_valid():
        messages.error(request, "Select at least one record and an operation.")
        return redirect_back(request, back)
    operation = form.cleaned_data["operation"]
    records = list(
        MemoryRecord.objects.for_tenant(principal.tenant_pk).filter(memory_id__in=ids).select_related("project")
    )
    if len(records) != len(set(ids)):
        raise Http404("Some selected records do not exist.")
    reason = form.cleaned_data["reason"]
    if not form.cleaned_data["confirm"] or not reason:
        if form.cleaned_data["confirm"]:
            messages.error(request, "Give a reason; it is audited.")
        context = {
            "records": records,
            "operation": operation,
            "reason": reason,
            "next": back,
            "label": dict(form.fields["operation"].choices)[operation],  # type: ignore[attr-defined]
        }
        return render(
            request, "dashboard/bulk_confirm.html", context, status=200 if not form.cleaned_data["confirm"] else 400
        )
    apply = actions.exclude_record if operation == "exclude" else actions.expire_record
    try:
        with transaction.atomic():
            for record in records:
                apply(principal, record.memory_id, reason)
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.detail}")
        return redirect_back(request, back)
    messages.success(request, f"{len(records)} record(s): {operation} applied.")
    return redirect_back(request, back)


# --- One fact through time --------------------------------------------------------------------


def _tombstone_page(request: HttpRequest, stones: list[Tombstone], asked: str) -> HttpResponse:
    """What was deleted, when and by which request; never the content (a tombstone holds none). 410 Gone."""
    principal = principal_of(request)
    context = {
        "asked": asked,
        "stones": stones,
        "requests": list({s.request_public_id: s.request for s in stones}.items()),
        "can_follow": deletion_service.may_read(principal),
        "can_lift": deletion_service.may_lift_tombstones(principal),
        "here": request.get_full_path(),
    }
    return render(request, "dashboard/tombstone.html", context, status=410)


def _record_stones(principal: Principal, memory_id: str) -> list[Tombstone]:
    return list(
        Tombstone.objects.filter(tenant_id=principal.tenant_id, kind=Tombstone.Kind.RECORD, memory_id=memory_id)
        .select_related("request__project")
        .order_by("-id")
    )


@member_required
def record_detail(request: HttpRequest, memory_id: str) -> HttpResponse:
    principal = principal_of(request)
    try:
        record = actions.get_record(principal, memory_id)
    except NotFound:
        # A deleted record's link (from the audit log, a report, a bookmark) says it was deleted.
        stones = _record_stones(principal, memory_id)
        if stones:
            return _tombstone_page(request, stones, memory_id)
        raise
    return HttpResponseRedirect(fact_url(record) + f"#{memory_id}")


@member_required
def fact(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    project, subject, predicate = (request.GET.get(k, "").strip() for k in ("project", "subject", "predicate"))
    if not (project and subject and predicate):
        raise Http404("Name a project, subject and predicate.")
    chain = reads.history(principal, project, subject, predicate)
    if not chain:
        scope = tombstones.fact_scope(principal.tenant_pk, project, subject, predicate)
        stones = list(
            Tombstone.objects.filter(tenant_id=principal.tenant_id, kind=Tombstone.Kind.RECORD, scope_hash=scope)
            .select_related("request__project")
            .order_by("-id")
        )
        if stones:
            return _tombstone_page(request, stones, f"{subject} · {predicate} in {project}")
        raise Http404("No such fact.")
    as_of_form = AsOfForm(request.GET)
    as_of_record = None
    asked = False
    if as_of_form.is_valid():
        valid_at, known_at = as_of_form.cleaned_data["valid_at"], as_of_form.cleaned_data["known_at"]
        asked = bool(valid_at or known_at)
        if asked:
            as_of_record = reads.as_of(principal, project, subject, predicate, valid_at=valid_at, known_at=known_at)
    current = reads.current(principal, project, subject, predicate)
    view = None
    try:
        view = reads.fact_view(principal, project, subject, predicate)
    except DomainError:
        view = None
    memory_ids = [r.memory_id for r in chain]
    policy = policy_for(principal.tenant_pk, project, predicate)
    head = next((r for r in chain if r.is_head), chain[-1])
    context = {
        "project": project,
        "subject": subject,
        "predicate": predicate,
        "chain": chain,
        "current": current,
        "view": view,
        "head": head,
        "can_exclude": principal.can_curate and head.excludable,
        "can_expire": principal.can_curate and head.expirable,
        "as_of_form": as_of_form,
        "as_of_record": as_of_record,
        "asked": asked,
        "events": AuditEvent.objects.filter(tenant_id=principal.tenant_id, object_id__in=memory_ids).order_by(
            *AUDIT_ORDER
        )[:50],
        "dispute": Dispute.objects.filter(
            tenant_id=principal.tenant_id,
            project__key=project,
            subject_id=subject,
            predicate=predicate,
            status=Dispute.Status.OPEN,
        ).first(),
        "operations": OPERATIONS,
        "policy": policy,
        "manual_field": is_manual(policy),
        # "Recheck now" is offered only when the server can fetch the field's canonical source itself.
        "can_fetch": rechecks.can_fetch(policy),
        "attempts": RecheckAttempt.objects.filter(record__in=[r.pk for r in chain]).order_by("-id")[:50],
        "derived": dependants_of(chain),
        "can_curate": principal.can_curate,
        "can_request_deletion": deletion_service.may_act(principal),
        "here": request.get_full_path(),
    }
    return render(request, partial(request, "dashboard/fact.html", "asof"), context)


# What each single-record operation does, for its confirmation page.
CONFIRM_WORDS = {
    "exclude": (
        "Exclude from context",
        "The record is kept, but never handed to an agent again; agents holding a copy get a notice.",
    ),
    "expire": (
        "Expire, keep as history",
        "The record stops being valid now and stays as history for as-of "
        "questions; copies built on it are suspended or marked stale.",
    ),
}


def _record_operation(request: HttpRequest, memory_id: str, operation: str, done: str) -> HttpResponse:
    """Exclude or expire one record: a confirmation page first (no JavaScript needed), then the change."""
    principal = principal_of(request)
    record = actions.get_record(principal, memory_id)
    if not principal.can_curate:
        raise Forbidden("Only owners and admins exclude or expire records.")
    form = ReasonForm(request.POST)
    back = safe_next(request, fact_url(record))
    if not confirmed(request) or not form.is_valid():
        if not form.is_valid():
            messages.error(request, "Give a reason; it is audited. Nothing was changed.")
        label, explanation = CONFIRM_WORDS[operation]
        context = {
            "title": f"{label}: {record.memory_id}",
            "explanation": explanation,
            "records": [record],
            "action": reverse(f"dashboard:{operation}", args=[record.memory_id]),
            "ask_reason": True,
            "reason": request.POST.get("reason", "").strip(),
            "button": f"Confirm: {label.lower()}",
            "next": back,
        }
        status = 400 if confirmed(request) else 200
        return render(request, "dashboard/confirm.html", context, status=status)
    apply: Callable[[Principal, str, str], MemoryRecord] = (
        actions.exclude_record if operation == "exclude" else actions.expire_record
    )
    try:
        apply(principal, memory_id, form.cleaned_data["reason"])
    except (NotFound, Forbidden):
        raise
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.detail}")
        return redirect_back(request, fact_url(record))
    messages.success(request, f"{memory_id} {done}.")
    return redirect_back(request, fact_url(record))


@member_required
@require_POST
def exclude(request: HttpRequest, memory_id: str) -> HttpResponse:
    return _record_operation(request, memory_id, "exclude", "is excluded from agents' context")


@member_required
@require_POST
def expire(request: HttpRequest, memory_id: str) -> HttpResponse:
    return _record_operation(request, memory_id, "expire", "has expired and is kept as history")


# --- Disputes ---------------------------------------------------------------------------------


@member_required
def dispute_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    show = request.GET.get("status", "open")
    disputes = (
        Dispute.objects.filter(tenant_id=principal.tenant_id)
        .select_related("project", "resolved_by", "winner")
        .prefetch_related("candidates__issuer")
        .order_by("opened_at" if show == "open" else "-opened_at")
    )
    if show in Dispute.Status.values:
        disputes = disputes.filter(status=show)
    context = {"disputes": disputes[:100], "show": show, "can_curate": principal.can_curate}
    return render(request, "dashboard/disputes.html", context)


@member_required
@require_POST
def resolve(request: HttpRequest, dispute_id: str) -> HttpResponse:
    principal = principal_of(request)
    dispute = actions.get_dispute(principal, dispute_id)
    form = ResolveForm(request.POST)
    back = reverse("dashboard:disputes") + f"#{dispute.public_id}"
    if not form.is_valid():
        messages.error(request, "Give a reason; it is audited. The dispute is still open.")
        return redirect_back(request, back)
    winner = form.cleaned_data["winner"]
    try:
        actions.resolve_dispute(
            principal,
            dispute_id,
            winner=None if winner == "__exclude_all__" else (winner or None),
            exclude_all=winner == "__exclude_all__",
            reason=form.cleaned_data["reason"],
        )
    except (NotFound, Forbidden):
        raise
    except DomainError as exc:
        detail = exc.detail
        if exc.extra.get("errors"):
            detail = " ".join(m for msgs in exc.extra["errors"].values() for m in msgs)
        messages.error(request, f"The dispute is still open: {detail}")
        return redirect_back(request, back)
    messages.success(request, f"Dispute {dispute_id} resolved.")
    return redirect_back(request, back)


# --- Audit log --------------------------------------------------------------------------------


@member_required
def audit_log(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    form = AuditFilterForm(request.GET)
    events: list[AuditEvent] = []
    next_after = None
    if form.is_valid():
        data = form.cleaned_data
        qs = AuditEvent.objects.filter(tenant_id=principal.tenant_id)
        if data["actor"]:
            qs = qs.filter(actor_name=data["actor"])
        if data["action"]:
            qs = qs.filter(action=data["action"])
        if data["object"]:
            qs = qs.filter(object_id=data["object"])
        if data["since"]:
            qs = qs.filter(at__gte=data["since"])
        if data["until"]:
            qs = qs.filter(at__lte=data["until"])
        after = None
        if data["after"]:
            # Keyset on (at, id): `at <= cursor` bounds an index range scan, the OR only trims its edge.
            moment, row = data["after"]
            after = Q(at__lte=moment) & (Q(at__lt=moment) | Q(id__lt=row))
        events, last = keyset_page(qs, order=AUDIT_ORDER, after=after)
        next_after = AuditCursorField.encode(last.at, last.pk) if last else None
    return render(
        request,
        partial(request, "dashboard/audit.html", "table"),
        {"form": form, "events": events, "next_after": next_after},
    )
