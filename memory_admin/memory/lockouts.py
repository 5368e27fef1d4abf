"""Sign-in lockouts seen and lifted by a tenant's admins (the counting itself is accounts.lockout).

An admin sees the tenant's people with failed sign-ins in the lockout period and unlocks one: the failures
counted for that login are forgotten, from every address, and the unlock is audited. A lock on an address
is not a tenant's to lift (an address is shared by whoever uses it, in any tenant): the operator clears it
with `manage.py axes_reset_ip <address>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from memory_admin.accounts import lockout
from memory_admin.accounts.models import Principal, Role
from memory_admin.memory import audit
from memory_admin.memory.errors import Forbidden, NotFound

_MAX_ID = 2**63 - 1


@dataclass(frozen=True)
class LoginFailures:
    principal: Principal
    failures: int
    locked: bool


def _require_admin(actor: Principal) -> None:
    if not actor.has_role(Role.ADMIN):
        raise Forbidden("Only admins unlock sign-ins.")


def _humans(actor: Principal) -> list[Principal]:
    return list(Principal.objects.filter(tenant_id=actor.tenant_pk, kind=Principal.Kind.HUMAN).order_by("username"))


def failed_sign_ins(actor: Principal) -> list[LoginFailures]:
    """The tenant's people with failed sign-ins in the lockout period, locked ones first."""
    _require_admin(actor)
    people = {p.username: p for p in _humans(actor)}
    counts = lockout.failures_by_login(people)
    rows = [LoginFailures(people[name], n, lockout.is_locked(n)) for name, n in counts.items() if n > 0]
    return sorted(rows, key=lambda row: (not row.locked, row.principal.username))


def unlock(actor: Principal, principal_id: int | str, *, reason: str = "") -> Principal:
    """Forget the failed sign-ins of one of the tenant's people; audited as `login.unlocked`."""
    _require_admin(actor)
    raw = str(principal_id)
    if not (raw.isascii() and raw.isdigit() and int(raw) <= _MAX_ID):
        raise NotFound("No such person.")
    person = Principal.objects.filter(tenant_id=actor.tenant_pk, kind=Principal.Kind.HUMAN, pk=int(raw)).first()
    if person is None:
        raise NotFound("No such person.")
    with transaction.atomic():
        failures = lockout.failures_by_login([person.username]).get(person.username, 0)
        lockout.clear_login(person.username)
        audit.record_event(
            tenant=actor.tenant_pk,
            actor=actor,
            action=audit.Action.LOGIN_UNLOCKED,
            object_type="principal",
            object_id=str(person.pk),
            before={"login": person.username, "failures": failures, "locked": lockout.is_locked(failures)},
            after={"login": person.username, "failures": 0, "locked": False},
            reason=reason,
        )
    return person
