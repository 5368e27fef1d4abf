"""Dashboard pages for API tokens (admins): the tenant's tokens with their state and last use, issuing one
to an agent (the token is shown once, in that answer only) and revoking one after a confirmation. Each calls
memory.tokens, as the API and the commands do; owners and compliance staff are refused (403)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from memory_admin.accounts.models import Principal
from memory_admin.dashboard import nav
from memory_admin.dashboard.forms import LocalDateTimeField
from memory_admin.dashboard.helpers import (
    confirmed,
    keyset_page,
    principal_of,
    redirect_back,
    safe_next,
)
from memory_admin.dashboard.nav import page
from memory_admin.dashboard.templatetags.dashboard import when
from memory_admin.memory import tokens
from memory_admin.memory.errors import DomainError

_MAX_ID = 2**63 - 1


class TokenForm(forms.Form):
    principal = forms.ChoiceField(label="Agent")
    name = forms.CharField(max_length=tokens.NAME_MAX_LENGTH, label="Name (what or where it is used)")
    expires_at = LocalDateTimeField(required=False, label="Expires at (blank: never)")

    def __init__(self, *args: Any, agents: list[Principal], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["principal"].choices = [(a.name, a.name) for a in agents]  # type: ignore[attr-defined]


def _list_page(request: HttpRequest, form: TokenForm, status: int = 200) -> HttpResponse:
    actor = principal_of(request)
    rows = tokens.tokens_of(actor)
    before = request.GET.get("before", "")
    after = Q(id__lt=int(before)) if before.isascii() and before.isdigit() and int(before) <= _MAX_ID else None
    page, last = keyset_page(rows, order=["-id"], after=after)
    context = {
        "rows": [(token, token.state()) for token in page],
        "next_before": last.pk if last else None,
        "form": form,
    }
    return render(request, "dashboard/tokens.html", context, status=status)


@page(nav.TOKENS)
def token_list(request: HttpRequest) -> HttpResponse:
    actor = principal_of(request)
    return _list_page(request, TokenForm(agents=tokens.agents_of(actor)))


@page(nav.TOKENS)
@require_POST
def token_new(request: HttpRequest) -> HttpResponse:
    """Issue a token; the answer shows it once, rendered in this response (never in a URL, a redirect or a
    message, which would keep it in the session or its cookie)."""
    actor = principal_of(request)
    form = TokenForm(request.POST, agents=tokens.agents_of(actor))
    if form.is_valid():
        data = form.cleaned_data
        try:
            token, raw = tokens.issue_for_agent(
                actor, data["principal"], name=data["name"], expires_at=data["expires_at"]
            )
        except DomainError as exc:
            for field, problems in (exc.extra.get("errors") or {"__all__": [exc.detail]}).items():
                form.add_error(field if field in form.fields else None, " ".join(problems))
        else:
            response = render(request, "dashboard/token_issued.html", {"token": token, "raw": raw})
            response["Cache-Control"] = "no-store"  # the secret must not stay in the browser's cache
            return response
    return _list_page(request, form, status=400)


@page(nav.TOKENS)
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke a token after a confirmation page (with a reason); its next API request answers 401."""
    actor = principal_of(request)
    token = tokens.token_of(actor, token_id)  # 403 for non-admins, 404 for another tenant's token
    back = reverse("dashboard:tokens")
    if not confirmed(request):
        context = {
            "title": f"Revoke the token {token.prefix}… ({token.name})",
            "explanation": "Requests made with this token are refused from now on; this cannot be undone — "
            "issue a new token instead. The revocation is audited.",
            "details": [
                ("Agent", token.principal.name or token.principal.username),
                ("Name", token.name),
                ("Prefix", f"{token.prefix}…"),
                ("Last used", when(token.last_used_at) if token.last_used_at else "never"),
            ],
            "action": reverse("dashboard:token_revoke", args=[token.pk]),
            "button": "Confirm: revoke token",
            "ask_reason": True,
            "reason": request.POST.get("reason", ""),
            "next": safe_next(request, back),
        }
        return render(request, "dashboard/confirm.html", context)
    try:
        tokens.revoke(token, actor=actor, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Not revoked: {exc.detail}")
    else:
        messages.success(request, f"Token {token.prefix}… ({token.name}) revoked.")
    return redirect_back(request, back)
