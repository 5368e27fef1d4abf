"""Dashboard pages for the derived stores: agents' open notices and the retrieval preview."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from memory_admin.dashboard import nav
from memory_admin.dashboard.helpers import principal_of
from memory_admin.dashboard.nav import page
from memory_admin.derived import search, selectors
from memory_admin.derived.models import Invalidation


@page(nav.AGENTS)
def agents(request: HttpRequest) -> HttpResponse:
    """Open invalidation notices, oldest first: a notice delivered is not a notice applied."""
    principal = principal_of(request)
    now = timezone.now()
    notices = selectors.open_notices(principal.tenant_pk, limit=500)
    by_agent: dict[str, list[Invalidation]] = {}
    for notice in notices:
        by_agent.setdefault(notice.agent.name, []).append(notice)
    rows = [
        {
            "agent": name,
            "count": len(items),
            "oldest": items[0].created_at,
            "age": now - items[0].created_at,
            "notices": items,
        }
        for name, items in sorted(by_agent.items(), key=lambda kv: kv[1][0].created_at)
    ]
    return render(request, "dashboard/agents.html", {"rows": rows, "total": len(notices)})


@page(nav.RETRIEVAL)
def retrieval(request: HttpRequest) -> HttpResponse:
    """What an agent would retrieve now, and which stale copies the usable filter holds back."""
    principal = principal_of(request)
    q = request.GET.get("q", "").strip()[:2000]
    project = request.GET.get("project", "").strip()[:100] or None
    subject = request.GET.get("subject", "").strip()[:200] or None
    predicate = request.GET.get("predicate", "").strip()[:200] or None
    result = None
    error = ""
    if q:
        try:
            result = search.search(principal, project_id=project, q=q, k=10, subject_id=subject, predicate=predicate)
        except OSError as exc:  # the index on disk cannot be read
            error = f"The vector index could not be read: {exc}"
    context = {
        "q": q,
        "project": project or "",
        "subject": subject or "",
        "predicate": predicate or "",
        "result": result,
        "error": error,
    }
    return render(request, "dashboard/retrieval.html", context)
