"""The audit log: every audited change, filtered and paged by keyset on the time it happened."""

from __future__ import annotations

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from memory_admin.dashboard import nav
from memory_admin.dashboard.forms import (
    AuditCursorField,
    AuditFilterForm,
)
from memory_admin.dashboard.helpers import (
    keyset_page,
    partial,
    principal_of,
)
from memory_admin.dashboard.nav import page
from memory_admin.memory import selectors as memory_selectors
from memory_admin.memory.models import AuditEvent

AUDIT_ORDER = memory_selectors.AUDIT_ORDER  # by the time events happened, the id breaking ties


# --- Audit log --------------------------------------------------------------------------------


@page(nav.AUDIT)
def audit_log(request: HttpRequest) -> HttpResponse:
    principal = principal_of(request)
    form = AuditFilterForm(request.GET)
    events: list[AuditEvent] = []
    next_after = None
    if form.is_valid():
        data = form.cleaned_data
        qs = memory_selectors.audit_events(principal.tenant_pk, data)
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
