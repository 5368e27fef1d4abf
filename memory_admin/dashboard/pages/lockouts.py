"""Dashboard page for a tenant's admins: people locked out after failed sign-ins, and unlocking them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from memory_admin.accounts.lockout import lockout_minutes
from memory_admin.dashboard import nav
from memory_admin.dashboard.helpers import principal_of
from memory_admin.dashboard.nav import page
from memory_admin.memory import lockouts


@page(nav.LOCKOUTS)
@require_http_methods(["GET"])
def sign_in_lockouts(request: HttpRequest) -> HttpResponse:
    rows = lockouts.failed_sign_ins(principal_of(request))
    return render(request, "dashboard/lockouts.html", {"rows": rows, "minutes": lockout_minutes()})


@page(nav.LOCKOUTS)
@require_http_methods(["POST"])
def unlock(request: HttpRequest, principal_id: str) -> HttpResponseBase:
    person = lockouts.unlock(principal_of(request), principal_id, reason=request.POST.get("reason", "")[:2000])
    messages.success(request, f"{person.username} can sign in again.")
    return HttpResponseRedirect(reverse("dashboard:lockouts"))
