"""The disputes page: the candidates side by side with what differs between them marked, and a failed
resolution shown again with the chosen side kept and the problem beside the control it concerns.

`dispute_list` and `resolve` both render through `disputes_page`, so a refused resolution is the same page,
not a redirect that forgets the choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
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
from memory_admin.memory import actions
from memory_admin.memory import selectors as memory_selectors
from memory_admin.memory.errors import DomainError, Forbidden, NotFound
from memory_admin.memory.models import MemoryRecord


@dataclass(frozen=True)
class Row:
    """One labelled line of a candidate; `differs` when the candidates do not all agree on it."""

    label: str
    value: Any
    differs: bool


@dataclass
class Candidate:
    record: MemoryRecord
    value_rows: list[Row] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


@dataclass(frozen=True)
class Failure:
    """A resolution that was refused: the side chosen, the reason typed, and what was wrong with which."""

    dispute_id: str
    winner: str
    reason: str
    error: str
    field: str  # "winner" or "reason": where the message is shown


def compare(candidates: list[MemoryRecord]) -> list[Candidate]:
    """Each candidate's value (field by field when every value is an object) and provenance, each line
    marked where the candidates differ."""
    values = [c.value for c in candidates]
    views = [Candidate(record=c) for c in candidates]
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
        ("Source", [c.source_canonical_ref for c in candidates]),
        ("Revision", [c.source_revision for c in candidates]),
        ("Issued by", [c.issuer.name for c in candidates]),
        ("Valid from", [c.valid_from for c in candidates]),
        ("Recorded", [c.recorded_from for c in candidates]),
    ]
    for label, seen in provenance:
        for view, one in zip(views, seen, strict=True):
            view.rows.append(Row(label, one, differs=_differ(seen)))
    return views


def _differ(values: list[Any]) -> bool:
    return len(values) > 1 and any(v != values[0] for v in values[1:])


def disputes_page(
    request: HttpRequest, principal: Principal, show: str, failure: Failure | None = None, status: int = 200
) -> HttpResponse:
    rows = [
        (d, compare(candidates)) for d, candidates in memory_selectors.disputes(principal.tenant_pk, show, limit=100)
    ]
    context = {"rows": rows, "show": show, "can_curate": principal.can_curate, "failure": failure}
    return render(request, "dashboard/disputes.html", context, status=status)


# --- Disputes ---------------------------------------------------------------------------------


@page(nav.DISPUTES)
def dispute_list(request: HttpRequest) -> HttpResponse:
    return disputes_page(request, principal_of(request), request.GET.get("status", "open"))


def resolved_words(dispute: Any) -> str:
    """What a resolution changed, as the owner reads it: the fact by its name and what agents now get."""
    fact = f"{dispute.subject_id} · {dispute.predicate}"
    if dispute.winner is not None:
        return f"Resolved {fact}: agents now get {wording.plain(dispute.winner.value, limit=120)}."
    return f"Resolved {fact}: every side is excluded, so agents get no value until a new one is written."


@page(nav.DISPUTES)
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
    return redirect_back(request, back)
