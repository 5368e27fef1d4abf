"""The overview: what needs the signed-in person (the inbox), the records' health and the latest changes.

One view serves a page and its htmx fragment (`template#partial`), so every page also works without JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from deletion import selectors as deletion_selectors
from deletion import service as deletion_service
from deletion import tombstones
from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal
from memory_admin.dashboard import nav, wording
from memory_admin.dashboard.helpers import (
    fact_url,
    principal_of,
)
from memory_admin.dashboard.nav import page
from memory_admin.dashboard.pages.deletions import scope_words
from memory_admin.demo import volume_progress
from memory_admin.derived import selectors as derived_selectors
from memory_admin.derived.embedding import embedder_status
from memory_admin.memory import audit, expiry, stats, task_failures
from memory_admin.memory import selectors as memory_selectors
from memory_admin.memory.models import AuditEvent, FieldPolicy, MemoryRecord

Status = MemoryRecord.Status


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
    # What `since` is, said before the relative time: "opened 3 days ago", "due 39 days ago".
    since_verb: str = "since"


def _inbox(principal: Principal, now: datetime) -> list[InboxItem]:
    """What needs this person, by role: curators (owners, admins) resolve disputes, recheck high-risk
    overdue fields and chase unapplied notices; compliance staff approve and follow deletions; admins fix
    policies whose canonical source failed its last check. Each list is bounded; none counts the table, and
    each is a fixed number of queries (selectors) whatever the number of rows or policies."""
    items: list[InboxItem] = []
    tenant_id = principal.tenant_pk
    if principal.can_curate:
        for dispute in memory_selectors.open_disputes(tenant_id, limit=10):
            items.append(
                InboxItem(
                    "dispute",
                    f"{dispute.subject_id} · {dispute.predicate}",
                    f"{dispute.n} sources disagree; agents get no value until you choose",  # type: ignore[attr-defined]
                    reverse("dashboard:disputes") + f"#{dispute.public_id}",
                    dispute.opened_at,
                    urgent=True,
                )
            )
        for record, policy in memory_selectors.overdue_high_risk(tenant_id, now, limit=50):
            assert record.recheck_after is not None  # the selector keeps only records with one
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
        for row in derived_selectors.open_notices_by_agent(tenant_id, limit=10):
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
        zone = timezone.get_current_timezone()
        for request in deletion_selectors.needing_compliance(tenant_id, limit=20):
            failed: int = request.failed  # type: ignore[attr-defined]
            if request.state == DeletionRequest.State.AWAITING_APPROVAL:
                what = "awaiting a second approval"
            else:
                what = f"{failed} store{'s' if failed != 1 else ''} failed; retry or look at the error"
            if request.due_by:
                deadline = datetime.combine(request.due_by, time(23, 59), tzinfo=zone)
                what += f"; {wording.days_left(deadline, now)} (due {wording.people_date(request.due_by)})"
            items.append(
                InboxItem(
                    "deletion",
                    f"Deletion of {scope_words(request)}",  # by what it covers; its id is on its page
                    what,
                    reverse("dashboard:deletion", args=[request.public_id]),
                    request.accepted_at,
                    urgent=bool(request.due_by and request.due_by <= (now + timedelta(days=3)).date()),
                )
            )
    if principal.has_role("admin"):
        for policy, last in memory_selectors.failing_canonical_sources(tenant_id, limit=50):
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
    for item in items:
        item.since_verb = SINCE_VERBS.get(item.kind, "since")
    return items


# What each inbox item's time is: "opened 3 days ago" (a dispute), "due 39 days ago" (a recheck), ...
SINCE_VERBS = {
    "dispute": "opened",
    "recheck": "was due",
    "notice": "oldest sent",
    "expiry": "asked",
    "deletion": "accepted",
    "policy": "last checked",
}


# The freshness card's bands, each coloured by its records' own `recheck_after` (not by a fixed age), with the
# records page's freshness filter that lists them (the "fresh" filter holds both the fresh and the soon band).
FRESHNESS_BANDS = [
    ("fresh", "Fresh", "next recheck more than 7 days off", "fresh"),
    ("soon", "Recheck within 7 days", "still fresh, due soon", "fresh"),
    ("due", "Past its recheck time", "unverified since, not wrong", "recheck_due"),
    ("never", "Never verified", "no recheck has confirmed it yet", "never_verified"),
]
# The stacked bar's width in SVG units (the bar scales to the card's width).
BAR_WIDTH = 1000


@dataclass(frozen=True)
class Band:
    """One band of the freshness card: its records, share and place on the stacked bar, and where it is listed."""

    key: str
    label: str
    meaning: str
    n: int
    percent: int
    x: int
    width: int
    href: str


def freshness_bands(bands: dict[str, int]) -> list[Band]:
    """The freshness card's bands: each one's count, its share of the accepted records (rounded, shown), and its
    segment of one stacked bar (x and width in BAR_WIDTH units, end to end, from the running total so that
    rounding never leaves a gap)."""
    total = sum(bands.values())
    records = reverse("dashboard:records")
    out = []
    x = running = 0
    for key, label, meaning, filter_key in FRESHNESS_BANDS:
        n = bands[key]
        running += n
        end = round(BAR_WIDTH * running / total) if total else 0
        out.append(
            Band(
                key=key,
                label=label,
                meaning=meaning,
                n=n,
                percent=round(100 * n / total) if total else 0,
                x=x,
                width=end - x,
                href=f"{records}?status=accepted&freshness={filter_key}",
            )
        )
        x = end
    return out


@dataclass(frozen=True)
class Tile:
    """One count on the overview, labelled so that it explains itself (no footnote): the number, the status badge
    when it counts records of one status, and what they are."""

    n: int
    label: str
    href: str
    badge: str = ""
    title: str = ""


# What the records of each status are, as a tile says it under the badge.
STATUS_MEANINGS: dict[str, str] = {
    Status.ACCEPTED: "current values agents get",
    Status.SUPERSEDED: "replaced values, kept as history",
    Status.EXCLUDED: "kept, never handed to agents",
    Status.EXPIRED: "ended, kept as history",
}


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def overview_tiles(by_status: dict[str, int], deleted: int, open_disputes: int, overdue: int) -> list[Tile]:
    """The overview's tiles, each saying what it counts: records by status (a dispute's records named as such),
    deleted records, open disputes (which hold two or more records each) and overdue rechecks."""
    records = reverse("dashboard:records")
    tiles = []
    for status in Status.values:
        if status == Status.DELETED:
            continue
        n = by_status.get(status, 0)
        if status == Status.DISPUTED:
            label = (
                f"{_plural(n, 'record', 'records')}, one per source, in {open_disputes} open "
                f"{_plural(open_disputes, 'dispute', 'disputes')}"
            )
        else:
            label = STATUS_MEANINGS.get(status, "records")
        tiles.append(Tile(n, label, f"{records}?status={status}", badge=status))
    tiles.append(
        Tile(
            deleted,
            "records under a deletion tombstone, hidden or purged",
            reverse("dashboard:deletions"),
            badge="deleted",
        )
    )
    tiles.append(
        Tile(
            open_disputes,
            f"open {_plural(open_disputes, 'dispute', 'disputes')}: agents get no value until a person chooses",
            reverse("dashboard:disputes"),
        )
    )
    tiles.append(
        Tile(
            overdue,
            f"overdue {_plural(overdue, 'recheck', 'rechecks')}: current values past their own recheck time "
            "(unverified, not wrong)",
            f"{records}?freshness=recheck_due",
        )
    )
    return tiles


def tile_columns(count: int) -> int:
    """Columns for `count` tiles on a wide screen (4, 3 or 5; app.css has a grid for each) so that no row holds a
    lone tile: the first that divides the count, else the one whose last row is fullest."""
    choices = (4, 3, 5)
    for columns in choices:
        if count % columns == 0:
            return columns
    return max(choices, key=lambda c: count % c)


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
        "open_disputes": memory_selectors.open_dispute_count(tenant_id),
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
    what: str = ""  # the object, when it is not a record: "the policy for submission_deadline"

    @property
    def at(self) -> datetime:
        return self.event.at

    @property
    def object_id(self) -> str:
        return self.event.object_id


def _object_words(event: AuditEvent, facts: dict[str, tuple[str, str]]) -> str:
    """A changed object that is not a record, by what it is ("the policy for submission_deadline", "the API token
    'demo' of agent"), never by its row number or public id (those are in the audit log's detail)."""
    snapshot = event.after or event.before or {}
    if event.object_type == "field_policy" and snapshot.get("predicate"):
        where = f" in {snapshot['project_id']}" if snapshot.get("project_id") else ""
        return f"the policy for {snapshot['predicate']}{where}"
    if event.object_type == "token" and snapshot.get("name"):
        holder = f" of {snapshot['principal']}" if snapshot.get("principal") else ""
        return f"the API token “{snapshot['name']}”{holder}"
    if event.object_type == "dispute":
        candidates = snapshot.get("candidates") or []
        fact = facts.get(str(candidates[0])) if candidates else None
        return f"the dispute over {fact[0]} · {fact[1]}" if fact else "a dispute"
    if event.object_type == "deletion":
        return "a deletion request"
    return f"a {wording.label(event.object_type).lower()}"


def _recent_changes(tenant_id: int) -> list[Change]:
    """The latest audit events as "subject · predicate: old → new by whom", newest first (the time shown).

    An assertion that replaced a value is written as two events (the old head superseded, the new record
    created, at the same instant); they are told as one change."""
    events, facts = memory_selectors.recent_changes(tenant_id, limit=15)
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
        change.what = _object_words(event, facts)
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


@page(nav.OVERVIEW)
def overview(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    now = timezone.now()
    counts = _health_counts(principal.tenant_pk, now)
    by_status, bands = counts["by_status"], counts["bands"]
    tiles = overview_tiles(by_status, counts["deleted"], counts["open_disputes"], bands["due"])
    context = {
        "inbox": _inbox(principal, now),
        # Deleted records leave no row once purged: their tombstones are what count (and the tile links to
        # the deletion requests, where each one is followed).
        "tiles": tiles,
        "tile_columns": tile_columns(len(tiles)),
        "deleted": counts["deleted"],
        "open_disputes": counts["open_disputes"],
        # The same records as the freshness card's red band and the records page's "recheck due" filter.
        "overdue": bands["due"],
        "accepted": sum(bands.values()),
        "fresh_percent": round(100 * (bands["fresh"] + bands["soon"]) / max(sum(bands.values()), 1)),
        "bands": freshness_bands(bands),
        "bar_width": BAR_WIDTH,
        "recent": _recent_changes(principal.tenant_pk),
        # Which embedder search uses here: a model that could not load (hashing instead) is said, never silent.
        "embedder": embedder_status(),
        # While `make run` loads the demo's synthetic volume in the background: how far it is (none otherwise).
        "demo_volume": volume_progress(principal.tenant_pk),
        # Rows a background task had to skip: owners and admins fix or exclude them.
        "task_failures": (
            task_failures.recent_failures(principal.tenant_pk)[:20] if principal.has_role("owner", "admin") else []
        ),
    }
    return render(request, "dashboard/overview.html", context)
