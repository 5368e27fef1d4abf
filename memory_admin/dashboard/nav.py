"""The dashboard's one navigation list: each page group's menu entry, with who may open it.

The base template's menu shows a person the entries `visible_to` them, and every view of a group is wrapped
in `page(ENTRY)`, which refuses (403) anyone the entry is not shown to: the menu and the access rule are the
same data, so they cannot disagree. A finer rule inside a page (only admins edit policies, only an owner lifts
a tombstone) stays with the domain function that the view calls.

A new page: its module under dashboard/pages/, an entry here (or the entry of the group it joins), its URL in
urls.py, and a line in tests/dashboard/test_navigation_matches_access.py's expectations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from memory_admin.accounts.models import CURATOR_ROLES, Principal, Role
from memory_admin.dashboard.helpers import member_required, principal_of
from memory_admin.memory.errors import Forbidden


@dataclass(frozen=True)
class NavEntry:
    label: str
    url_name: str  # in the "dashboard" namespace
    roles: frozenset[str] | None = None  # None: every member of the tenant
    refusal: str = ""  # what a person refused is told

    def allows(self, principal: Principal) -> bool:
        return self.roles is None or principal.has_role(*self.roles)


OVERVIEW = NavEntry("Overview", "overview")
RECORDS = NavEntry("Records", "records")
DISPUTES = NavEntry("Disputes", "disputes")
EXPIRY_REQUESTS = NavEntry(
    "Expiry requests",
    "expiry_requests",
    frozenset(CURATOR_ROLES),
    "Only owners and admins decide expiry requests.",
)
RECHECKS = NavEntry("Rechecks", "rechecks")
AGENTS = NavEntry("Agents", "agents")
RETRIEVAL = NavEntry("Retrieval", "retrieval")
AUDIT = NavEntry("Audit log", "audit")
DELETIONS = NavEntry(
    "Deletions",
    "deletions",
    frozenset({Role.COMPLIANCE, Role.OWNER, Role.ADMIN}),
    "Deletion requests are for compliance staff, owners and admins.",
)
EXPORTS = NavEntry("Exports", "exports")
POLICIES = NavEntry(
    "Policies", "policies", frozenset({Role.ADMIN, Role.COMPLIANCE}), "Only admins manage field policies."
)
LOCKOUTS = NavEntry("Lockouts", "lockouts", frozenset({Role.ADMIN}), "Only admins unlock sign-ins.")
TOKENS = NavEntry("Tokens", "tokens", frozenset({Role.ADMIN}), "Only admins manage API tokens.")
CONFORMANCE = NavEntry(
    "Conformance",
    "conformance",
    frozenset({Role.ADMIN, Role.COMPLIANCE}),
    "Only admins and compliance staff run the conformance suite.",
)

# In menu order.
NAV: tuple[NavEntry, ...] = (
    OVERVIEW,
    RECORDS,
    DISPUTES,
    EXPIRY_REQUESTS,
    RECHECKS,
    AGENTS,
    RETRIEVAL,
    AUDIT,
    DELETIONS,
    EXPORTS,
    POLICIES,
    LOCKOUTS,
    TOKENS,
    CONFORMANCE,
)


def visible_to(principal: Principal) -> list[NavEntry]:
    return [entry for entry in NAV if entry.allows(principal)]


def page(entry: NavEntry) -> Callable[[Callable[..., HttpResponseBase]], Callable[..., HttpResponseBase]]:
    """A view of `entry`'s page group: signed in, in a tenant (member_required), and shown the entry."""

    def decorate(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not entry.allows(principal_of(request)):
                raise Forbidden(entry.refusal or f"{entry.label} is not open to your role.")
            return view(request, *args, **kwargs)

        guarded.nav_entry = entry  # type: ignore[attr-defined]
        return member_required(guarded)

    return decorate
