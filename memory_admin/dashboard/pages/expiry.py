"""Dashboard page for owners and admins: agents' requests that a fact be expired (memory.expiry), decided here."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from memory_admin.dashboard import nav
from memory_admin.dashboard.helpers import fact_url, principal_of
from memory_admin.dashboard.nav import page
from memory_admin.memory import expiry
from memory_admin.memory.errors import DomainError, Forbidden, NotFound
from memory_admin.memory.models import ExpiryRequest


def _page(request: HttpRequest, *, failed: str = "", error: str = "", status: int = 200) -> HttpResponse:
    principal = principal_of(request)
    pending = expiry.pending_requests(principal)
    decided = [
        *expiry.pending_requests(principal, status=ExpiryRequest.Status.APPROVED, limit=10),
        *expiry.pending_requests(principal, status=ExpiryRequest.Status.DECLINED, limit=10),
    ]
    decided.sort(key=lambda r: r.decided_at or r.created_at, reverse=True)
    rows = [{"request": r, "fact_url": fact_url(r.record)} for r in pending]
    context = {"rows": rows, "decided": decided[:10], "failed": failed, "error": error}
    return render(request, "dashboard/expiry_requests.html", context, status=status)


@page(nav.EXPIRY_REQUESTS)
@require_http_methods(["GET"])
def expiry_requests(request: HttpRequest) -> HttpResponse:
    return _page(request)


@page(nav.EXPIRY_REQUESTS)
@require_http_methods(["POST"])
def decide(request: HttpRequest, request_id: str, verb: str) -> HttpResponseBase:
    if verb not in ("approve", "decline"):
        raise NotFound("No such decision.")
    principal = principal_of(request)
    found = expiry.get_request(principal, request_id)
    what = f"{found.record.subject_id} · {found.record.predicate}"
    try:
        expiry.decide_expiry(
            principal, request_id, approve=verb == "approve", reason=request.POST.get("reason", "")[:2000]
        )
    except (NotFound, Forbidden):
        raise
    except DomainError as exc:
        detail = " ".join(m for msgs in (exc.extra.get("errors") or {}).values() for m in msgs) or exc.detail
        messages.error(request, f"Nothing changed for {what}: {detail}")
        return _page(request, failed=found.public_id, error=detail, status=exc.status)
    if verb == "approve":
        messages.success(request, f"{what} has expired and is kept as history; agents no longer get it.")
    else:
        messages.success(
            request,
            f"Kept {what} as it is; {found.requested_by.name or found.requested_by.username} "
            "sees the request declined.",
        )
    return HttpResponseRedirect(reverse("dashboard:expiry_requests"))
