"""Records and facts: the records table (filtered by the record filter the API's list shares), bulk
curation, one fact through time, and excluding or expiring one record after a confirmation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.db import transaction
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from deletion import selectors as deletion_selectors
from deletion import service as deletion_service
from deletion.models import Tombstone
from memory_admin.accounts.models import Principal
from memory_admin.dashboard import nav, timeplot, wording
from memory_admin.dashboard.forms import (
    AsOfForm,
    BulkForm,
    ReasonForm,
    RecordFilterForm,
)
from memory_admin.dashboard.helpers import (
    PAGE_SIZE,
    confirmed,
    fact_url,
    partial,
    principal_of,
    redirect_back,
    safe_next,
)
from memory_admin.dashboard.nav import page
from memory_admin.dashboard.templatetags.dashboard import RECORD_ROW_COLUMNS, RecordRow
from memory_admin.derived.dependants import dependants_of
from memory_admin.memory import actions, reads, receipts, rechecks, stats, validation
from memory_admin.memory import selectors as memory_selectors
from memory_admin.memory.errors import DomainError, Forbidden, NotFound
from memory_admin.memory.filters import RecordFilter
from memory_admin.memory.models import MemoryRecord, RecordQuerySet
from memory_admin.memory.policies import is_manual, policy_for
from memory_admin.memory.reads import FRESHNESS_LABELS

Status = MemoryRecord.Status
# The as-of control offers the moment each of the newest versions took effect, up to this many.
QUICK_PICK_VERSIONS = 6

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


# --- Records ----------------------------------------------------------------------------------


def _filtered_records(principal: Principal, wanted: RecordFilter, *, counting: bool = False) -> RecordQuerySet:
    """The tenant's live records that match the filter (memory.filters, the API's record list parses into the
    same). `counting`: the same set for a count, cheaper to count: with a status asked, the tombstoned records
    are already out (a deletion sets status "deleted" together with tombstoned_at), so the count leaves out
    the tombstoned_at test and PostgreSQL counts from an index alone (record_project_field_newest holds the
    project, predicate and status) rather than visiting the row of every match; `countable` adds the test of
    a deletion's hiding rules only while the tenant has one."""
    if counting and wanted.status is not None:
        records = MemoryRecord.all_objects.countable(principal.tenant_pk)
    else:
        records = MemoryRecord.objects.for_tenant(principal.tenant_pk)
    return wanted.apply(records, principal.tenant_pk)


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


def _records_total(principal: Principal, wanted: RecordFilter) -> tuple[int, bool]:
    """How many records match, up to TOTAL_CAP (and whether there are more): bounded work, one query.

    Filtered by the status alone (the default view), the maintained counts answer on PostgreSQL
    (stats.status_counts: a few counter rows, where counting up to the cap reads 10,001 index entries);
    otherwise, and on SQLite, the matching rows are counted up to the cap."""
    counts = None if wanted.narrowed else stats.status_counts(principal.tenant_pk)
    if counts is not None:
        # No status is every live record: tombstoned ones are the "deleted" ones (stats.status_counts).
        if wanted.status is None:
            n = sum(c for s, c in counts.items() if s != Status.DELETED)
        else:
            n = counts[wanted.status]
    else:
        records = _filtered_records(principal, wanted, counting=True)
        n = records.order_by().values("id")[: TOTAL_CAP + 1].count()
    return min(n, TOTAL_CAP), n > TOTAL_CAP


@page(nav.RECORDS)
def record_list(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    form = RecordFilterForm(request.GET)
    rows: list[RecordRow] = []
    next_after = None
    total, more = 0, False
    valid = form.is_valid()
    status_view = form.status_view
    history = status_view in ("superseded", "all")
    sort = request.GET.get("sort") or ("fact" if history else "newest")
    if sort not in RECORD_SORTS:
        sort = "newest"
    order = RECORD_SORTS[sort]
    if valid:
        data = form.cleaned_data
        filtered = _filtered_records(principal, form.record_filter)
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
        total, more = _records_total(principal, form.record_filter)
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


# The bulk operations: the verb people read on the bar and the confirmation ("Expire 2 records"), the past
# tense for the message, and what the change means for agents beyond "they stop getting these values".
BULK_WORDS = {
    "expire": (
        "Expire",
        "Expired",
        "They stay as history: as-of questions about the time they held still see them.",
    ),
    "exclude": (
        "Exclude",
        "Excluded",
        "They stay on record but are never handed to an agent again, not even for past dates.",
    ),
}
# At most this many records in one bulk change (a page of the records table holds at most 200).
BULK_MAX = 200


def _records_words(n: int) -> str:
    return f"{n} record{'s' if n != 1 else ''}"


def _bulk_refusal(operation: str, record: MemoryRecord) -> str | None:
    """Why `record` cannot take the bulk operation as it stands now (None: it can)."""
    fact = f"{record.subject_id} · {record.predicate}"
    if operation == "expire" and not record.expirable:
        return f"{fact} is {record.status}, and only an accepted record can expire"
    if operation == "exclude" and record.status == Status.EXCLUDED:
        return f"{fact} is already excluded"
    if operation == "exclude" and not record.excludable:
        return f"{fact} is part of an open dispute; resolve the dispute instead"
    return None


def _copies_words(records: list[MemoryRecord]) -> str:
    """What is built on the records and hears of the change: agent sessions, summaries, plans."""
    built = dependants_of(records)
    copies = [
        (len(built["contexts"]), "agent session", "holding one gets a notice"),
        (len(built["summaries"]), "summary", "built on them is marked stale"),
        (len(built["plans"]), "plan", "built on them is suspended"),
    ]
    told = [f"{n} {noun}{'s' if n != 1 else ''} {what}" for n, noun, what in copies if n]
    return f"Built on them: {'; '.join(told)}." if told else "No agent session, summary or plan is built on them."


@page(nav.RECORDS)
@require_POST
def bulk_records(request: HttpRequest) -> HttpResponse:
    """Expire or exclude the selected records: a confirmation naming what stops reaching agents first, then all
    of them or none (the domain's expire_record / exclude_record in one transaction).

    A selection that names a record that does not exist (or not in this tenant), or one that changed since the
    confirmation was shown, changes nothing and says which."""
    principal = principal_of(request)
    if not principal.can_curate:
        raise Forbidden("Only owners and admins may exclude or expire records.")
    form = BulkForm(request.POST)
    back = safe_next(request, reverse("dashboard:records"))
    ids = list(dict.fromkeys(i.strip() for i in request.POST.getlist("ids") if i.strip()))
    if not form.is_valid():
        messages.error(request, "Choose Expire or Exclude for the selected records. Nothing was changed.")
        return redirect_back(request, back)
    if not ids:
        messages.error(request, "Select at least one record first. Nothing was changed.")
        return redirect_back(request, back)
    if len(ids) > BULK_MAX or any(len(i) > 64 for i in ids):
        messages.error(request, f"Select at most {BULK_MAX} records at once. Nothing was changed.")
        return redirect_back(request, back)
    operation = form.cleaned_data["operation"]
    verb, done, after = BULK_WORDS[operation]
    records = sorted(
        memory_selectors.records_by_memory_id(principal.tenant_pk, ids), key=lambda r: ids.index(r.memory_id)
    )
    if len(records) != len(ids):
        missing = len(ids) - len(records)
        messages.error(
            request,
            f"{_records_words(missing)} of the selection no longer exist{'s' if missing == 1 else ''}. "
            "Nothing was changed; select again.",
        )
        return redirect_back(request, back)
    # What the confirmation showed: each record's status then. One that changed since is not changed blindly.
    seen = {r.memory_id: request.POST.get(f"seen-{r.memory_id}") for r in records}
    confirming = bool(form.cleaned_data["confirm"])
    changed = [r for r in records if confirming and seen[r.memory_id] not in (None, r.status)]
    refusals = [why for r in records if (why := _bulk_refusal(operation, r))]
    if changed or refusals:
        named = [f"{r.subject_id} · {r.predicate} is now {r.status}" for r in changed] + refusals
        messages.error(request, f"Nothing was changed: {'; '.join(dict.fromkeys(named))}.")
        return redirect_back(request, back)
    reason = form.cleaned_data["reason"]
    if not confirming or not reason:
        if confirming:
            messages.error(request, "Give a reason; it is audited. Nothing was changed.")
        zone = timezone.get_current_timezone()
        context = {
            "records": [(r, wording.plain(r.value, zone, 80)) for r in records],
            "operation": operation,
            "title": f"{verb} {_records_words(len(records))}",
            "after": after,
            "copies": _copies_words(records),
            "reason": reason,
            "next": back,
        }
        return render(request, "dashboard/bulk_confirm.html", context, status=400 if confirming else 200)
    apply = actions.exclude_record if operation == "exclude" else actions.expire_record
    record = records[0]
    try:
        with transaction.atomic():
            for record in records:
                apply(principal, record.memory_id, reason)
    except (NotFound, Forbidden):
        raise
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {record.subject_id} · {record.predicate}: {exc.detail}")
        return redirect_back(request, back)
    facts = ", ".join(f"{r.subject_id} · {r.predicate}" for r in records[:5])
    more = f" and {len(records) - 5} more" if len(records) > 5 else ""
    messages.success(
        request,
        f"{done} {_records_words(len(records))} ({facts}{more}): agents no longer get these values.",
    )
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


@page(nav.RECORDS)
def record_detail(request: HttpRequest, memory_id: str) -> HttpResponse:
    principal = principal_of(request)
    try:
        record = actions.get_record(principal, memory_id)
    except NotFound:
        # A deleted record's link (from the audit log, a report, a bookmark) says it was deleted.
        stones = deletion_selectors.record_tombstones(principal.tenant_pk, memory_id)
        if stones:
            return _tombstone_page(request, stones, memory_id)
        raise
    return HttpResponseRedirect(fact_url(record) + f"#{memory_id}")


def _fact_link(project: str, subject: str, predicate: str, **asked: str) -> str:
    query = {"project": project, "subject": subject, "predicate": predicate, **{k: v for k, v in asked.items() if v}}
    return f"{reverse('dashboard:fact')}?{urlencode(query)}"


@dataclass
class QuickPick:
    """A link of the as-of control: a moment people name ("Yesterday", "Version 2 took effect") and the text the
    control then shows and the server reads back (wording.people_moment, parsed by forms.parse_moment)."""

    label: str
    text: str
    href: str
    current: bool


def _quick_picks(
    chain: list[MemoryRecord], latest: int, now: datetime, fact: tuple[str, str, str], asked: dict[str, str]
) -> list[QuickPick]:
    """Yesterday and a week ago (at this minute), then when each version took effect (its valid-from, to the
    minute after when it has seconds, so the moment falls inside it), newest version first."""
    zone = timezone.get_current_timezone()
    minute = now.replace(second=0, microsecond=0)
    moments = [("Yesterday", minute - timedelta(days=1)), ("A week ago", minute - timedelta(days=7))]
    for r in sorted(chain, key=lambda r: -r.revision)[:QUICK_PICK_VERSIONS]:
        start = r.valid_from
        if start.second or start.microsecond:
            start = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        moments.append((f"{wording.version(r.revision, latest).capitalize()} took effect", start))
    picks = []
    for label, moment in moments:
        text = wording.people_moment(moment, zone)
        href = _fact_link(*fact, valid_at=text, known_at=asked.get("known_at", ""))
        picks.append(QuickPick(label, text, href, current=asked.get("valid_at") == text))
    return picks


def _versions_named(reason: str, revisions: dict[str, int], latest: int) -> str:
    """A status reason as the page says it: "before mem-deadline-001 (revision 1) takes over" becomes "before
    version 1 of 3 takes over" (the domain writes record ids into its reasons; the page shows none)."""
    if not reason or not revisions:
        return reason
    ids = "|".join(re.escape(memory_id) for memory_id in sorted(revisions, key=len, reverse=True))
    return re.sub(
        rf"\b({ids})\b(?: \(revision \d+\))?", lambda m: wording.version(revisions[m.group(1)], latest), reason
    )


def _headline(current: MemoryRecord | None, dispute: Any, head: MemoryRecord, now: datetime) -> str:
    """The fact's state in a few words ("Current", "Current · recheck due"): the page's first line; when it was
    last checked follows in the template ("· checked 2 days ago", the date on hover)."""
    if current is not None:
        due = reads.freshness_of(current, now) == "recheck_due"
        return f"Current · {FRESHNESS_LABELS['recheck_due']}" if due else "Current"
    if dispute is not None:
        return "Disputed · agents get no value until it is resolved"
    return f"No usable value · the latest version is {head.status}"


@page(nav.RECORDS)
def fact(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    # As the filter form reads them: trimmed and NFKC-normalised, so a link typed with fullwidth letters finds the fact.
    # The API's names (project_id, subject_id) are accepted too, so a link built from a record's fields works.
    project, subject, predicate = (
        validation.normalize_identifier((request.GET.get(name) or request.GET.get(api_name) or "").strip())
        for name, api_name in (("project", "project_id"), ("subject", "subject_id"), ("predicate", "predicate"))
    )
    if not (project and subject and predicate):
        raise Http404("Name a project, subject and predicate.")
    chain = reads.history(principal, project, subject, predicate)
    if not chain:
        stones = deletion_selectors.fact_tombstones(principal.tenant_pk, project, subject, predicate)
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
    policy = policy_for(principal.tenant_pk, project, predicate)
    head = next((r for r in chain if r.is_head), chain[-1])
    now = timezone.now()
    trail = memory_selectors.fact_trail(principal.tenant_pk, chain, project, subject, predicate)
    attempts = trail.attempts
    valid_at = as_of_form.cleaned_data.get("valid_at") if as_of_form.is_valid() else None
    known_at = as_of_form.cleaned_data.get("known_at") if as_of_form.is_valid() else None
    latest = max(r.revision for r in chain)
    revisions = {r.memory_id: r.revision for r in chain}
    shown = as_of_form.shown()
    neighbours = memory_selectors.fact_neighbours(principal.tenant_pk, project, subject, predicate)
    context = {
        "project": project,
        "subject": subject,
        "predicate": predicate,
        # In the order things happened: by when the system learned them, then by valid time; each with why it has
        # its status, the versions it names said by their number rather than their record id.
        # (The successor's revision comes from the chain: the query reads only its record id.)
        "chain": [
            (
                r,
                _versions_named(r.status_reason, revisions, latest),
                revisions.get(r.superseded_by.memory_id) if r.superseded_by else None,
            )
            for r in sorted(chain, key=lambda r: (r.recorded_from, r.valid_from, r.revision))
        ],
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
        # What the as-of control shows: the app's format for what it read, what was typed when it could not.
        "as_of_shown": shown,
        "quick_picks": _quick_picks(chain, latest, now, (project, subject, predicate), shown),
        "as_of_record": as_of_record,
        # One numbering people read (issue 34, item 4): "version 2 of 3"; the source's revision is a detail.
        "latest_revision": latest,
        "headline": _headline(current, trail.dispute, head, now),
        "previous_fact": neighbours.previous,
        "previous_url": _fact_link(project, *neighbours.previous) if neighbours.previous else "",
        "next_fact": neighbours.following,
        "next_url": _fact_link(project, *neighbours.following) if neighbours.following else "",
        "asked": asked,
        "events": trail.events,
        # Each audit event with the version it names (the record's id stays in a copyable detail).
        "event_rows": [
            (e, revisions.get(e.object_id), _versions_named(e.reason, revisions, latest)) for e in trail.events
        ],
        "dispute": trail.dispute,
        "candidates": trail.candidates,
        "operations": OPERATIONS,
        "policy": policy,
        "manual_field": is_manual(policy),
        # "Recheck now" is offered only when the server can fetch the field's canonical source itself.
        "can_fetch": rechecks.can_fetch(policy),
        "attempts": attempts,
        # Every read for acting on this fact, answered or refused (templates/dashboard/_receipts.html).
        "receipts": memory_selectors.fact_receipts(principal, project, subject, predicate),
        "can_read_all_receipts": receipts.may_read_any(principal),
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
    messages.success(request, f"{record.subject_id} · {record.predicate} ({wording.version(record.revision)}) {done}.")
    return redirect_back(request, fact_url(record))


@page(nav.RECORDS)
@require_POST
def exclude(request: HttpRequest, memory_id: str) -> HttpResponse:
    return _record_operation(request, memory_id, "exclude", "is excluded from agents' context")


@page(nav.RECORDS)
@require_POST
def expire(request: HttpRequest, memory_id: str) -> HttpResponse:
    return _record_operation(request, memory_id, "expire", "has expired and is kept as history")


@page(nav.RECORDS)
def receipt(request: HttpRequest, receipt_id: str) -> HttpResponse:
    """A decision receipt as a JSON file, for an auditor to keep or verify offline (`memory-governance verify`):
    owners and compliance staff any of the tenant's, others their own (404 otherwise)."""
    found = receipts.get_receipt(principal_of(request), receipt_id)
    response = JsonResponse(receipts.as_document(found), json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="{found.public_id}.json"'
    return response
