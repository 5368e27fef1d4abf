"""What every dashboard page module shares: the door check, the signed-in principal, redirects back, the
confirmation step, htmx fragments and keyset paging. Public names, so the page modules import from here and
never from each other's private helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Model, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode

from memory_admin.accounts.models import principal_of as principal_of  # the one request -> principal helper
from memory_admin.memory.errors import Forbidden, NotFound
from memory_admin.memory.models import MemoryRecord

PAGE_SIZE = 50


def member_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Signed in and in a tenant; domain errors become a page status and message, never a 500."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not getattr(request.user, "tenant_id", None):
            raise Http404("No tenant")
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.detail) from None
        except Forbidden as exc:
            return render(request, "dashboard/refused.html", {"detail": exc.detail}, status=403)

    return wrapper


def partial(request: HttpRequest, template: str, name: str) -> str:
    """The whole page, or only its fragment for an htmx request that targets it."""
    return f"{template}#{name}" if request.headers.get("HX-Request") else template


def safe_next(request: HttpRequest, fallback: str) -> str:
    """The posted `next` when it is a path on this site, else `fallback`: it ends up in redirects and in
    links (confirmation pages), so a `javascript:` URL or another host must never pass."""
    target = request.POST.get("next") or ""
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def redirect_back(request: HttpRequest, fallback: str) -> HttpResponseRedirect:
    """Back to the posted `next` (a path on this site), else to `fallback`."""
    return HttpResponseRedirect(safe_next(request, fallback))


def confirmed(request: HttpRequest) -> bool:
    """A change that needs a second, deliberate POST (a confirmation page, no JavaScript needed)."""
    return request.POST.get("confirm") == "yes"


def fact_url(record: MemoryRecord) -> str:
    """The fact page of a record's fact key."""
    query = urlencode({"project": record.project.key, "subject": record.subject_id, "predicate": record.predicate})
    return f"{reverse('dashboard:fact')}?{query}"


def keyset_page[M: Model](
    rows: QuerySet[M], *, order: Sequence[str], after: Q | None, size: int = PAGE_SIZE
) -> tuple[list[M], M | None]:
    """One page of `rows` in `order`, starting after the cursor condition `after`; and the page's last row
    when there is a next page (the caller encodes its cursor from it). One query of size + 1 rows, no COUNT:
    the extra row only says whether another page exists."""
    if after is not None:
        rows = rows.filter(after)
    page = list(rows.order_by(*order)[: size + 1])
    if len(page) > size:
        page = page[:size]
        return page, page[-1]
    return page, None
