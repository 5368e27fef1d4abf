"""Dashboard pages. Each view parses input, calls the domain (actions/reads), and renders.

One view serves a page and its htmx fragment (`template#partial`), so every page also works without
JavaScript.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.db.models import Count, Min, Q, TextField
from django.db.models.functions import Cast
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from deletion import service as deletion_service
from deletion import tombstones
from deletion.models import DeletionRequest, StoreProgress, Tombstone
from memory_admin.accounts.models import Principal
from memory_admin.dashboard import timeplot, wording
from memory_admin.dashboard.dispute_page import Failure, disputes_page
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
from memory_admin.dashboard.templatetags.dashboard import RECORD_ROW_COLUMNS, RecordRow
from memory_admin.derived.dependants import dependants_of
from memory_admin.derived.embedding import embedder_status
from memory_admin.derived.models import Invalidation
from memory_admin.memory import actions, audit, expiry, reads, rechecks, stats, task_failures, validation
from memory_admin.memory.errors import DomainError, Forbidden, NotFound
from memory_admin.memory.models import AuditEvent, Dispute, FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.policies import is_manual, policies_for, policy_for

Status = MemoryRecord.Status
# Audit events are shown by the time they happened (`at`, which a domain action may set to its own `now`),
# not by insertion; the id breaks ties. The audit page's keyset cursor follows the same order.
AUDIT_ORDER = ("-at", "-id")

# The four operations of PRODUCT.md rule 2, each with the one line that says when it fits.
OPERATIONS = [
    ("exclude", "Exclude from context", "It is wrong or must not reach an agent, but stays on record: exclude."),
    (
        "expire",
        "Expire, keep as history",
        "It stopped holding and nothing replaces it: expire; as-of questions still see it.",
    ),
    ("recheck", "Recheck now", "The value changed at its source, or may have: recheck."),
    ("delete", "Request deletion", "It must not be kept anywhere, in any store: request deletion."),
]


# --- Overview ---------------------------------------------------------------------------------


@dataclass
class InboxItem:
    """One thing that needs the signed-in person, linked to where it is handled."""

    kind: str  # dispute | recheck | notice | deletion | policy
    title: str
    detail: str
    href: str
    since: datetime | None = None
    urgent: bool = False


def _inbox(principal: Principal, now: datetime) -> list[InboxItem]:
    """What needs this person, by role: curators (owners, admins) resolve disputes, recheck high-risk
    overdue fields and chase unapplied notices; compliance staff approve and follow deletions; admins fix
    policies whose canonical source failed its last check. Each list is bounded; none counts the table."""
    items: list[InboxItem] = []
    tenant_id = principal.tenant_pk
    if principal.can_curate:
        for dispute in (
            Dispute.objects.filter(tenant_id=tenant_id, status=Dispute.Status.OPEN)
            .select_related("project")
            .annotate(n=Count("candidates"))
            .order_by("opened_at")[:10]
        ):
            items.append(
                InboxItem(
                    "dispute",
                    f"{dispute.subject_id} · {dispute.predicate}",
                    f"{dispute.n} sources disagree; agents get no value until you choose",
                    reverse("dashboard:disputes") + f"#{dispute.public_id}",
                    dispute.opened_at,
                    urgent=True,
                )
            )
        high = {
            p.predicate
            for p in FieldPolicy.objects.filter(tenant_id=tenant_id, risk=FieldPolicy.Risk.HIGH).only("predicate")
        }
        due = list(
            MemoryRecord.objects.for_tenant(tenant_id)
            .kept_fresh(now)
            .filter(recheck_after__lte=now, predicate__in=high)
            .select_related("project")
            .order_by("recheck_after")[:50]
        )
        governing = policies_for(tenant_id, {(r.project.key, r.predicate) for r in due})
        for record in due:
            policy = governing[(record.project.key, record.predicate)]
            if policy is None or policy.risk != FieldPolicy.Risk.HIGH or record.recheck_after is None:
                continue
            blocks = policy.on_failure == FieldPolicy.OnFailure.BLOCK_ACTION
            items.append(
                InboxItem(
                    "recheck",
                    f"{record.subject_id} · {record.predicate}",
                    f"high risk, recheck {wording.overdue(record.recheck_after, now)}"
                    + ("; actions on it are blocked until verified" if blocks else ""),
                    fact_url(record),
                    record.recheck_after,
                    urgent=blocks,
                )
            )
        open_notices = (
            Invalidation.objects.filter(tenant_id=tenant_id, acknowledged_at__isnull=True)
            .values("agent__name")
            .annotate(n=Count("id"), oldest=Min("created_at"))
            .order_by("oldest")[:10]
        )
        for row in open_notices:
            items.append(
                InboxItem(
                    "notice",
                    f"{row['agent__name']}: {row['n']} notice{'s' if row['n'] != 1 else ''} not applied",
                    "delivered is not applied: the agent may still act on a replaced value",
                    reverse("dashboard:agents"),
                    row["oldest"],
                )
            )
        for asked in expiry.pending_requests(principal, limit=10):
            items.append(
                InboxItem(
                    "expiry",
                    f"{asked.record.subject_id} · {asked.record.predicate}",
                    f"{asked.requested_by.name or asked.requested_by.username} asks to expire it: {asked.reason}"
                    "; agents keep using it until you decide",
                    reverse("dashboard:expiry_requests") + f"#{asked.public_id}",
                    asked.created_at,
                )
            )
    if deletion_service.may_act(principal):
        failing = Q(stores__state=StoreProgress.State.FAILED) & Q(
            state__in=[DeletionRequest.State.ACCEPTED, DeletionRequest.State.PURGING]
        )
        waiting = (
            DeletionRequest.objects.filter(tenant_id=tenant_id)
            .filter(Q(state=DeletionRequest.State.AWAITING_APPROVAL) | failing)
            .select_related("project")
            .annotate(failed=Count("stores", filter=Q(stores__state=StoreProgress.State.FAILED)))
            .order_by("due_by", "id")[:20]
        )
        zone = timezone.get_current_timezone()
        for request in waiting:
            if request.state == DeletionRequest.State.AWAITING_APPROVAL:
                what = "awaiting a second approval"
            else:
                what = f"{request.failed} store{'s' if request.failed != 1 else ''} failed; retry or look at the error"
            if request.due_by:
                deadline = datetime.combine(request.due_by, time(23, 59), tzinfo=zone)
                what += f"; {wording.days_left(deadline, now)} (due {wording.people_date(request.due_by)})"
            items.append(
                InboxItem(
                    "deletion",
                    f"{request.public_id}: {request.get_scope_kind_display().lower()} in {request.project.key}",
                    what,
                    reverse("dashboard:deletion", args=[request.public_id]),
                    request.accepted_at,
                    urgent=bool(request.due_by and request.due_by <= (now + timedelta(days=3)).date()),
                )
            )
    if principal.has_role("admin"):
        for policy in FieldPolicy.objects.filter(tenant_id=tenant_id, canonical_source__isnull=False).select_related(
            "project"
        )[:50]:
            attempts = RecheckAttempt.objects.filter(tenant_id=tenant_id, record__predicate=policy.predicate)
            if policy.project_id is not None:
                attempts = attempts.filter(record__project_id=policy.project_id)
            last = attempts.exclude(trigger=RecheckAttempt.Trigger.MANUAL).order_by("-id").first()
            if last is None or last.verified:
                continue
            items.append(
                InboxItem(
                    "policy",
                    f"Policy for {policy.predicate}"
                    + (f" in {policy.project.key}" if policy.project else " (all projects)"),
                    f"its canonical source failed the last check: {last.get_outcome_display().lower()}",
                    reverse("dashboard:policy", args=[policy.pk]),
                    last.attempted_at,
                    urgent=True,
                )
            )
    return items


# The freshness chart's bands, each coloured by its records' own `recheck_after` (not by a fixed age).
FRESHNESS_BANDS = [
    ("fresh", "Fresh, recheck > 7 days off"),
    ("soon", "Recheck due within 7 days"),
    ("due", "Past its own recheck time"),
    ("never", "Never verified"),
]


def _health_counts(tenant_id: int, now: datetime) -> dict[str, Any]:
    """The overview's counts: maintained counters on PostgreSQL, exact counts on SQLite (memory/stats.py)."""
    figures = stats.record_stats(tenant_id, now)
    by_status, f = figures.by_status, figures.freshness
    bands = {
        "fresh": f["due_later"] + f["unscheduled"],
        "soon": f["due_1d"] + f["due_7d"],
        "due": f["overdue"],
        "never": f["never"],
    }
    return {
        "by_status": by_status,
        "bands": bands,
        "deleted": tombstones.deleted_record_count(tenant_id),
        "open_disputes": Dispute.objects.filter(tenant_id=tenant_id, status=Dispute.Status.OPEN).count(),
    }


@dataclass
class Change:
    """One line of the overview's recent changes: "subject · predicate: old → new by whom"."""

    event: AuditEvent
    fact: str | None
    words: str
    old: Any = None
    new: Any = None
    status_change: bool = False
    what: str = ""  # the object, when it is not a record: "Field policy 3"

    @property
    def at(self) -> datetime:
        return self.event.at

    @property
    def object_id(self) -> str:
        return self.event.object_id


def _recent_changes(tenant_id: int) -> list[Change]:
    """The latest audit events as "subject · predicate: old → new by whom", newest first (the time shown).

    An assertion that replaced a value is written as two events (the old head superseded, the new record
    created, at the same instant); they are told as one change."""
    # An agent's MCP tool call is audited (who asked what, when) but changes nothing: not a change here.
    changes = AuditEvent.objects.filter(tenant_id=tenant_id).exclude(action=audit.Action.MCP_TOOL_CALLED)
    events = list(changes.order_by(*AUDIT_ORDER)[:15])
    record_ids = {e.object_id for e in events if e.object_type == "record"}
    facts = {
        m: (s, p)
        for m, s, p in MemoryRecord.objects.filter(tenant_id=tenant_id, memory_id__in=record_ids).values_list(
            "memory_id", "subject_id", "predicate"
        )
    }
    replaced = {
        (e.at, facts.get(e.object_id)): e
        for e in events
        if e.action == audit.Action.RECORD_SUPERSEDED and e.object_id in facts
    }
    merged: set[int] = set()
    rows = []
    for event in events:
        fact = facts.get(event.object_id) if event.object_type == "record" else None
        change = Change(event, f"{fact[0]} · {fact[1]}" if fact else None, wording.action_words(event.action))
        change.what = f"{wording.label(event.object_type)} {event.object_id}"
        if event.action == audit.Action.RECORD_ASSERTED_CREATED and event.after:
            change.new = event.after.get("value")
            previous = replaced.get((event.at, fact)) if fact else None
            if previous is not None and previous.before:
                change.old = previous.before.get("value")
                change.words = "changed"
                merged.add(previous.pk)
        elif event.before and event.after and event.before.get("status") != event.after.get("status"):
            change.old, change.new = event.before.get("status"), event.after.get("status")
            change.status_change = True
        rows.append(change)
    return [r for r in rows if r.event.pk not in merged][:12]


@member_required
def overview(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    now = timezone.now()
    counts = _health_counts(principal.tenant_pk, now)
    by_status, bands = counts["by_status"], counts["bands"]
    peak = max([*bands.values(), 1])
    context = {
        "inbox": _inbox(principal, now),
        # Deleted records leave no row once purged: their tombstones are what count (and the tile links to
        # the deletion requests, where each one is followed).
        "counts": [(status, by_status.get(status, 0)) for status in Status.values if status != Status.DELETED],
        "disputed_records": by_status.get(Status.DISPUTED, 0),
        "deleted": counts["deleted"],
        "open_disputes": counts["open_disputes"],
        # The same records as the chart's red band and the records page's "recheck due" filter.
        "overdue": bands["due"],
        "chart": [(key, words, bands[key], round(300 * bands[key] / peak)) for key, words in FRESHNESS_BANDS],
        "recent": _recent_changes(principal.tenant_pk),
        # Which embedder search uses here: a model that could not load (hashing instead) is said, never silent.
        "embedder": embedder_status(),
        # Rows a background task had to skip: owners and admins fix or exclude them.
        "task_failures": (
            task_failures.recent_failures(principal.tenant_pk)[:20] if principal.has_role("owner", "admin") else []
        ),
    }
    return render(request, "dashboard/overview.html", context)


# --- Records ----------------------------------------------------------------------------------


def _filtered_records(principal: Principal, data: dict[str, Any], *, counting: bool = False) -> Any:
    """The tenant's live records that match the filters. `counting`: the same set for a count, cheaper to
    count: with a status other than "all", the tombstoned records are already out (a deletion sets status
    "deleted" together with tombstoned_at), so the count leaves out the tombstoned_at test and PostgreSQL
    counts from an index alone (record_project_field_newest holds the project, predicate and status)
    rather than visiting the row of every match; `countable` adds the test of a deletion's hiding rules only
    while the tenant has one."""
    status = data.get("status") or Status.ACCEPTED
    if counting and status != "all":
        records = MemoryRecord.all_objects.countable(principal.tenant_pk)
    else:
        records = MemoryRecord.objects.for_tenant(principal.tenant_pk)
    if status != "all":
        records = records.filter(status=status)
    if data.get("project"):
        records = records.in_project(principal.tenant_pk, data["project"])
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


# The records table's orders: a name in the URL (`sort=`), the columns it orders by (the id last, so each
# order is total and pages by keyset on the last row). History views default to grouping by fact.
RECORD_SORTS: dict[str, tuple[str, ...]] = {
    "newest": ("-id",),
    "oldest": ("id",),
    "fact": ("subject_id", "predicate", "project_id", "id"),
    "-fact": ("-subject_id", "-predicate", "-project_id", "-id"),
    "valid_from": ("valid_from", "id"),
    "-valid_from": ("-valid_from", "-id"),
    "revision": ("revision", "id"),
    "-revision": ("-revision", "-id"),
}
# Counting stops here: past it the page says "more than" rather than scanning a large table.
TOTAL_CAP = 10_000
# The filters other than the status: with none of them set, the maintained counts give the total.
NARROWING_FILTERS = ("project", "subject", "predicate", "source", "freshness", "q")


def _after_row(order: tuple[str, ...], row: dict[str, Any]) -> Q:
    """Rows strictly after `row` in `order` (lexicographic keyset: a = v1 and b > v2, or a > v1, ...)."""
    condition = Q()
    for i, column in enumerate(order):
        name = column.lstrip("-")
        step = Q(**{f"{name}__lt" if column.startswith("-") else f"{name}__gt": row[name]})
        for earlier in order[:i]:
            step &= Q(**{earlier.lstrip("-"): row[earlier.lstrip("-")]})
        condition |= step
    return condition


def _records_total(principal: Principal, data: dict[str, Any]) -> tuple[int, bool]:
    """How many records match, up to TOTAL_CAP (and whether there are more): bounded work, one query.

    Filtered by the status alone (the default view), the maintained counts answer on PostgreSQL
    (stats.status_counts: a few counter rows, where counting up to the cap reads 10,001 index entries);
    otherwise, and on SQLite, the matching rows are counted up to the cap."""
    narrowed = any(data.get(f) for f in NARROWING_FILTERS)
    counts = None if narrowed else stats.status_counts(principal.tenant_pk)
    if counts is not None:
        status = data.get("status") or Status.ACCEPTED
        # "all" is every live record: tombstoned ones are the "deleted" ones (stats.status_counts).
        n = sum(c for s, c in counts.items() if s != Status.DELETED) if status == "all" else counts[status]
    else:
        records = _filtered_records(principal, data, counting=True)
        n = records.order_by().values("id")[: TOTAL_CAP + 1].count()
    return min(n, TOTAL_CAP), n > TOTAL_CAP


@member_required
def record_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    form = RecordFilterForm(request.GET)
    rows: list[RecordRow] = []
    next_after = None
    total, more = 0, False
    status_view = form.cleaned_data.get("status") if form.is_valid() else "accepted"
    history = status_view in ("superseded", "all")
    sort = request.GET.get("sort") or ("fact" if history else "newest")
    if sort not in RECORD_SORTS:
        sort = "newest"
    order = RECORD_SORTS[sort]
    if form.is_valid():
        data = form.cleaned_data
        filtered = _filtered_records(principal, data)
        after = None
        if data.get("after") and order in (("-id",), ("id",)):
            after = Q(id__lt=data["after"]) if order == ("-id",) else Q(id__gt=data["after"])
        elif data.get("after"):
            fields = [c.lstrip("-") for c in order]
            last_row = filtered.filter(id=data["after"]).values(*fields).first()
            after = _after_row(order, last_row) if last_row else Q(pk__in=[])
        # keyset_page's one query of size + 1 rows, as RecordRow values (the project and issuer joined).
        size = data.get("size") or PAGE_SIZE
        page = filtered.filter(after) if after is not None else filtered
        rows = [RecordRow(*values) for values in page.order_by(*order).values_list(*RECORD_ROW_COLUMNS)[: size + 1]]
        if len(rows) > size:
            rows = rows[:size]
            next_after = rows[-1].id
        total, more = _records_total(principal, data)
    # History grouped by fact: each row knows whether it starts a new fact (a header row in the table).
    # (Only when the page holds more than one fact: a page of one fact's versions needs no header.)
    previous = None
    group_starts = set()
    for r in rows:
        key = (r.project_id, r.subject_id, r.predicate)
        if history and sort in ("fact", "-fact") and key != previous:
            group_starts.add(r.id)
        previous = key
    if len(group_starts) < 2:
        group_starts = set()
    context = {
        "form": form,
        "rows": rows,
        "group_starts": group_starts,
        "next_after": next_after,
        "status_view": status_view,
        "history": history,
        "sort": sort,
        "total": total,
        "total_more": more,
        "select_all": request.GET.get("select") == "all",
        "can_curate": principal.can_curate,
        "now": timezone.now(),
        # Each row links to `dashboard:record` as this prefix + memory_id + "/" (the template quotes the id):
        # one reverse() per page rather than one per row.
        "records_url": reverse("dashboard:records"),
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
    written = list(
        Tombstone.objects.filter(tenant_id=principal.tenant_id, kind=Tombstone.Kind.RECORD, memory_id=memory_id)
        .select_related("request__project")
        .order_by("-id")
    )
    return written + tombstones.pending_record_stones(principal.tenant_pk, memory_ids=[memory_id])


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
    # As the filter form reads them: trimmed and NFKC-normalised, so a link typed with fullwidth letters finds the fact.
    project, subject, predicate = (
        validation.normalize_identifier(request.GET.get(k, "").strip()) for k in ("project", "subject", "predicate")
    )
    if not (project and subject and predicate):
        raise Http404("Name a project, subject and predicate.")
    chain = reads.history(principal, project, subject, predicate)
    if not chain:
        scope = tombstones.fact_scope(principal.tenant_pk, project, subject, predicate)
        stones = list(
            Tombstone.objects.filter(tenant_id=principal.tenant_id, kind=Tombstone.Kind.RECORD, scope_hash=scope)
            .select_related("request__project")
            .order_by("-id")
        ) + tombstones.pending_record_stones(principal.tenant_pk, facts=[(project, subject, predicate)])
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
    now = timezone.now()
    attempts = list(RecheckAttempt.objects.filter(record__in=[r.pk for r in chain]).order_by("-id")[:50])
    dispute = (
        Dispute.objects.filter(
            tenant_id=principal.tenant_id,
            project__key=project,
            subject_id=subject,
            predicate=predicate,
            status=Dispute.Status.OPEN,
        )
        .prefetch_related("candidates__issuer")
        .first()
    )
    valid_at = as_of_form.cleaned_data.get("valid_at") if as_of_form.is_valid() else None
    known_at = as_of_form.cleaned_data.get("known_at") if as_of_form.is_valid() else None
    context = {
        "project": project,
        "subject": subject,
        "predicate": predicate,
        # In the order things happened: by when the system learned them, then by valid time.
        "chain": sorted(chain, key=lambda r: (r.recorded_from, r.valid_from, r.revision)),
        "current": current,
        "view": view,
        "head": head,
        # A value that takes effect later: "scheduled", with when it starts answering.
        "scheduled": [r for r in chain if r.status == Status.ACCEPTED and r.valid_from > now],
        # Agents acting on this field are refused (409 recheck_required) while it is not verified.
        "actions_blocked": bool(
            current is not None
            and reads.must_be_fresh_for_action(policy)
            and view is not None
            and not view.action_allowed
        ),
        "latest_attempt": next((a for a in attempts if a.record_id == (current.pk if current else None)), None),
        "plot": timeplot.plot(
            chain,
            now=now,
            current=current,
            as_of=as_of_record,
            valid_at=valid_at if asked else None,
            known_at=known_at if asked else None,
            zone=timezone.get_current_timezone(),
        ),
        "can_exclude": principal.can_curate and head.excludable,
        "can_expire": principal.can_curate and head.expirable,
        "as_of_form": as_of_form,
        "as_of_record": as_of_record,
        "asked": asked,
        "events": AuditEvent.objects.filter(tenant_id=principal.tenant_id, object_id__in=memory_ids).order_by(
            *AUDIT_ORDER
        )[:50],
        "dispute": dispute,
        "candidates": list(dispute.candidates.all()) if dispute else [],
        "operations": OPERATIONS,
        "policy": policy,
        "manual_field": is_manual(policy),
        # "Recheck now" is offered only when the server can fetch the field's canonical source itself.
        "can_fetch": rechecks.can_fetch(policy),
        "attempts": attempts,
        "derived": dependants_of(chain),
        "can_curate": principal.can_curate,
        "can_request_deletion": deletion_service.may_act(principal),
        "here": request.get_full_path(),
        # An htmx "Ask" swaps the answer and, out of band, the plot with its as-of mark.
        "oob": bool(request.headers.get("HX-Request")),
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


def _stops_reaching_agents(record: MemoryRecord, operation: str) -> list[tuple[str, str]]:
    """What the confirmation page says will stop reaching agents, as labelled lines."""
    zone = timezone.get_current_timezone()
    value = wording.plain(record.value, zone, 80)
    fact = f"{record.subject_id} · {record.predicate}"
    now = timezone.now()
    answering = record.status == Status.ACCEPTED and record.is_current_at(now)
    lines = []
    if operation == "exclude":
        if answering:
            lines.append(("Stops reaching agents", f"{value}, the current answer for {fact}"))
            lines.append(("Afterwards", "agents asking for this fact get no value until a new one is written"))
        else:
            lines.append(("Stops reaching agents", f"{value} ({record.status}) for {fact}, in as-of answers too"))
    else:
        if answering:
            lines.append(("Stops reaching agents", f"{value}, the current answer for {fact}, from now on"))
            lines.append(("Still answers", "as-of questions about the time it held"))
        else:
            lines.append(("Stops reaching agents", f"{value} for {fact} from now on"))
    built = dependants_of([record])
    copies = [
        (len(built["contexts"]), "agent session", "holding it gets a notice"),
        (len(built["summaries"]), "summary", "built on it is marked stale"),
        (len(built["plans"]), "plan", "built on it is suspended"),
    ]
    told = [f"{n} {noun}{'s' if n != 1 else ''} {what}" for n, noun, what in copies if n]
    lines.append(("Copies", "; ".join(told) if told else "no agent session, summary or plan is built on it"))
    return lines


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
            "details": _stops_reaching_agents(record, operation),
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
    return disputes_page(request, principal_of(request), request.GET.get("status", "open"))


@member_required
@require_POST
def resolve(request: HttpRequest, dispute_id: str) -> HttpResponse:
    principal = principal_of(request)
    dispute = actions.get_dispute(principal, dispute_id)
    form = ResolveForm(request.POST)
    back = reverse("dashboard:disputes") + f"#{dispute.public_id}"
    if not form.is_valid():
        # The same page again, the chosen side kept and the problem beside the reason (no redirect).
        error = "Give a reason; it is audited. The dispute is still open."
        messages.error(request, error)
        winner, reason = request.POST.get("winner", "")[:64], request.POST.get("reason", "")[:2000]
        failure = Failure(dispute.public_id, winner, reason, error, "reason")
        return disputes_page(request, principal, "open", failure, status=400)
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
        where = "reason" if "reason" in (exc.extra.get("errors") or {}) else "winner"
        failure = Failure(dispute.public_id, winner, form.cleaned_data["reason"], detail, where)
        return disputes_page(request, principal, "open", failure, status=exc.status)
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
