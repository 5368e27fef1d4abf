"""The disputes page: the candidates side by side, each side named by its source (where the claim came from, and
the agent and session that reported it), with what differs between them marked; a failed resolution shown again
with the chosen side kept and the problem beside the control it concerns; after a resolution, what agents now get,
a link back to the fact, and an undo (reopen) for a while (settings.DISPUTE_UNDO_MINUTES).

`dispute_list` and `resolve` both render through `disputes_page`, so a refused resolution is the same page,
not a redirect that forgets the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from memory_admin.accounts.models import Principal
from memory_admin.dashboard import nav, wording
from memory_admin.dashboard.forms import (
    ResolveForm,
)
from memory_admin.dashboard.helpers import (
    principal_of,
    redirect_back,
)
from memory_admin.dashboard.nav import page
from memory_admin.derived import selectors as derived_selectors
from memory_admin.memory import actions
from memory_admin.memory import selectors as memory_selectors
from memory_admin.memory.errors import DomainError, Forbidden, NotFound
from memory_admin.memory.models import Dispute, MemoryRecord


@dataclass(frozen=True)
class Row:
    """One labelled line of a candidate; `differs` when the candidates do not all agree on it."""

    label: str
    value: Any
    differs: bool


@dataclass
class Candidate:
    """One side of a dispute, named by its source: where the claim came from (`source`), and who reported it (the
    agent, and the conversation sessions of the events it was extracted from)."""

    record: MemoryRecord
    value_rows: list[Row] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    source_differs: bool = False

    @property
    def source(self) -> str:
        return self.record.source_canonical_ref

    @property
    def reported_by(self) -> str:
        """ "price-feed-a, in session s-41" / "price-feed-a, in sessions s-1 and s-2" / "price-feed-a"."""
        agent = self.record.issuer.name or self.record.issuer.username
        if not self.sessions:
            return agent
        if len(self.sessions) == 1:
            return f"{agent}, in session {self.sessions[0]}"
        return f"{agent}, in sessions {', '.join(self.sessions[:-1])} and {self.sessions[-1]}"


@dataclass(frozen=True)
class Undo:
    """A resolved dispute that can still be undone, until `until`."""

    until: datetime


@dataclass(frozen=True)
class Failure:
    """A resolution that was refused: the side chosen, the reason typed, and what was wrong with which."""

    dispute_id: str
    winner: str
    reason: str
    error: str
    field: str  # "winner" or "reason": where the message is shown


def compare(candidates: list[MemoryRecord], sessions: dict[str, str] | None = None) -> list[Candidate]:
    """Each candidate's value (field by field when every value is an object) and provenance, each line
    marked where the candidates differ. `sessions`: the session of each raw event (by public id)."""
    values = [c.value for c in candidates]
    sessions = sessions or {}
    views = [
        Candidate(
            record=c,
            sessions=list(dict.fromkeys(sessions[e] for e in (c.source_event_ids or []) if e in sessions)),
        )
        for c in candidates
    ]
    # Objects are compared field by field, unless they read as one thing (an amount with its currency).
    if values and all(isinstance(v, dict) and wording.show(v).kind == "pairs" for v in values):
        keys: list[str] = []
        for v in values:
            keys.extend(k for k in v if k not in keys)
        for key in keys:
            seen = [v.get(key) for v in values]
            for view, one in zip(views, seen, strict=True):
                view.value_rows.append(Row(wording.label(key), one, differs=_differ(seen)))
    else:
        for view, one in zip(views, values, strict=True):
            view.value_rows.append(Row("Value", one, differs=_differ(values)))
    provenance: list[tuple[str, list[Any]]] = [
        ("Source revision", [c.source_revision for c in candidates]),
        ("Valid from", [c.valid_from for c in candidates]),
        ("Recorded", [c.recorded_from for c in candidates]),
    ]
    sources = [c.source_canonical_ref for c in candidates]
    for view in views:
        view.source_differs = _differ(sources)
    for label, seen in provenance:
        for view, one in zip(views, seen, strict=True):
            view.rows.append(Row(label, one, differs=_differ(seen)))
    return views


def _differ(values: list[Any]) -> bool:
    return len(values) > 1 and any(v != values[0] for v in values[1:])


def disputes_page(
    request: HttpRequest, principal: Principal, show: str, failure: Failure | None = None, status: int = 200
) -> HttpResponse:
    found = memory_selectors.disputes(principal.tenant_pk, show, limit=100)
    event_ids = [e for _, candidates in found for c in candidates for e in (c.source_event_ids or [])]
    sessions = derived_selectors.sessions_of_events(principal.tenant_pk, event_ids)
    now = timezone.now()
    rows: list[tuple[Dispute, list[Candidate], Undo | None]] = []
    for d, candidates in found:
        until = actions.undo_until(d)
        undo = Undo(until) if principal.can_curate and until is not None and now <= until else None
        rows.append((d, compare(candidates, sessions), undo))
    context = {
        "rows": rows,
        "show": show,
        "can_curate": principal.can_curate,
        "failure": failure,
    }
    return render(request, "dashboard/disputes.html", context, status=status)


# --- Disputes ---------------------------------------------------------------------------------


@page(nav.DISPUTES)
def dispute_list(request: HttpRequest) -> HttpResponse:
    return disputes_page(request, principal_of(request), request.GET.get("status", "open"))


def resolved_words(dispute: Any) -> str:
    """What a resolution changed, as the owner reads it: the fact by its name and what agents now get (and from
    which source)."""
    fact = f"{dispute.subject_id} · {dispute.predicate}"
    if dispute.winner is not None:
        value = wording.plain(dispute.winner.value, limit=120)
        return f"Resolved {fact}: agents now get {value}, from {dispute.winner.source_canonical_ref}."
    return f"Resolved {fact}: every side is excluded, so agents get no value until a new one is written."


@page(nav.DISPUTES)
@require_POST
def resolve(request: HttpRequest, dispute_id: str) -> HttpResponse:
    principal = principal_of(request)
    dispute = actions.get_dispute(principal, dispute_id)
    form = ResolveForm(request.POST)
    if not form.is_valid():
        # The same page again, the chosen side kept and the problem beside the reason (no redirect).
        error = "Give a reason; it is audited. The dispute is still open."
        messages.error(request, error)
        winner, reason = request.POST.get("winner", "")[:64], request.POST.get("reason", "")[:2000]
        failure = Failure(dispute.public_id, winner, reason, error, "reason")
        return disputes_page(request, principal, "open", failure, status=400)
    winner = form.cleaned_data["winner"]
    try:
        resolved = actions.resolve_dispute(
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
    messages.success(request, resolved_words(resolved))
    # The resolved list, latest first: this dispute on top with what won, a link back to the fact, and undo.
    return redirect_back(request, f"{reverse('dashboard:disputes')}?status=resolved#{resolved.public_id}")


@page(nav.DISPUTES)
@require_POST
def reopen(request: HttpRequest, dispute_id: str) -> HttpResponse:
    """Undo a resolution (the dispute open again, the answer before it restored), while the window lasts."""
    principal = principal_of(request)
    dispute = actions.get_dispute(principal, dispute_id)
    fact = f"{dispute.subject_id} · {dispute.predicate}"
    try:
        actions.reopen_dispute(principal, dispute_id)
    except (NotFound, Forbidden):
        raise
    except DomainError as exc:
        messages.error(request, f"{fact}: the resolution was not undone. {exc.detail}")
        query = urlencode({"status": "resolved"})
        return redirect_back(request, f"{reverse('dashboard:disputes')}?{query}#{dispute.public_id}")
    messages.success(
        request,
        f"Undone: the dispute over {fact} is open again, and agents get no value for it until someone resolves it.",
    )
    return redirect_back(request, reverse("dashboard:disputes") + f"#{dispute.public_id}")
