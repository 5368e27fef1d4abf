"""API tokens with a lifecycle: issuing and revoking them, audited, for every door (the API, the dashboard
and the commands).

The token rows and their hashing live in accounts (below this layer); the actions are here because they
write audit events (memory.audit). Who may manage tokens: admins of the tenant, for the tenant's agents
only. An admin cannot mint a token for a human (that would let an admin act as an owner or a compliance
officer through the API); a command, run by the operator, may (`create_principal` prints one for any
principal). Agents neither list nor revoke tokens, their own included: a leaked token that could revoke
its siblings or list them would be a tool for whoever holds it; an admin rotates them.

A revoked or expired token is refused by BearerTokenAuthentication on its next request: lookups are not
cached, so "revoked" holds at once, in every process.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import ApiToken, ApiTokenQuerySet, Principal, Role
from memory_admin.accounts.services import create_token
from memory_admin.memory import audit, validation
from memory_admin.memory.errors import Forbidden, InvalidInput, InvalidState, NotFound

NAME_MAX_LENGTH = ApiToken._meta.get_field("name").max_length or 100
REASON_MAX_LENGTH = ApiToken._meta.get_field("revoke_reason").max_length or 2000
_MAX_ID = 2**63 - 1


def require_token_admin(actor: Principal) -> None:
    """Forbidden unless `actor` may manage the tenant's tokens (admins)."""
    if not actor.has_role(Role.ADMIN):
        raise Forbidden("Only admins manage API tokens.")


def _check_name(name: str) -> str:
    name = name.strip()
    problems = validation.text_problems(name)
    if not name:
        problems.append("Give the token a name (what or where it is used).")
    elif len(name) > NAME_MAX_LENGTH:
        problems.append(f"At most {NAME_MAX_LENGTH} characters.")
    if problems:
        raise InvalidInput({"name": problems})
    return name


def _check_expiry(expires_at: datetime | None, now: datetime) -> None:
    validation.check_datetimes(expires_at=expires_at)
    if expires_at is not None and expires_at <= now:
        raise InvalidInput({"expires_at": ["An expiry must lie in the future."]})


def _snapshot(token: ApiToken) -> dict[str, str | None]:
    """What the audit keeps of a token: never its secret nor its hash."""
    return {
        "name": token.name,
        "prefix": token.prefix,
        "principal": token.principal.name or token.principal.username,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


def tokens_of(actor: Principal) -> ApiTokenQuerySet:
    """The tenant's tokens, for an admin (newest first)."""
    require_token_admin(actor)
    return ApiToken.objects.for_tenant(actor.tenant_pk).order_by("-id")


def token_of(actor: Principal, token_id: int | str) -> ApiToken:
    """One of the tenant's tokens, for an admin; another tenant's token or no token is a 404."""
    require_token_admin(actor)
    raw = str(token_id)
    if not (raw.isascii() and raw.isdigit() and int(raw) <= _MAX_ID):
        raise NotFound("No such token.")
    token = ApiToken.objects.for_tenant(actor.tenant_pk).filter(pk=int(raw)).first()
    if token is None:
        raise NotFound("No such token.")
    return token


def agents_of(actor: Principal) -> list[Principal]:
    """The active agents an admin may issue tokens for."""
    require_token_admin(actor)
    return list(
        Principal.objects.filter(tenant_id=actor.tenant_pk, kind=Principal.Kind.AGENT, is_active=True).order_by("name")
    )


def issue(
    principal: Principal,
    *,
    name: str,
    expires_at: datetime | None = None,
    actor: Principal | None = None,
    reason: str = "",
    now: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Issue a token to `principal` and audit it as `token.issued`; returns the row and the raw token (the
    only time it exists outside the caller's hands). No permission check: see issue_for_agent for people;
    commands call this with `actor=None` (the audit shows "system")."""
    now = now or timezone.now()
    name = _check_name(name)
    _check_expiry(expires_at, now)
    if principal.tenant_id is None:
        raise InvalidInput({"principal": ["This principal belongs to no tenant."]})
    with transaction.atomic():
        token, raw = create_token(principal, name, expires_at=expires_at, created_by=actor)
        audit.record_event(
            tenant=principal.tenant_pk,
            actor=actor,
            action=audit.Action.TOKEN_ISSUED,
            object_type="token",
            object_id=str(token.pk),
            after=_snapshot(token),
            reason=reason,
            at=now,
        )
    return token, raw


def issue_for_agent(
    actor: Principal,
    agent_name: str,
    *,
    name: str,
    expires_at: datetime | None = None,
    now: datetime | None = None,
) -> tuple[ApiToken, str]:
    """An admin issues a token to one of the tenant's agents (see the module's docstring for why agents only)."""
    require_token_admin(actor)
    principal = Principal.objects.filter(tenant_id=actor.tenant_pk, name=agent_name).first()
    if principal is None:
        raise NotFound(f"No principal {agent_name!r} in this tenant.")
    if principal.kind != Principal.Kind.AGENT or not principal.is_active:
        raise InvalidInput({"principal": [f"{agent_name!r} is not an active agent: tokens are issued to agents."]})
    return issue(principal, name=name, expires_at=expires_at, actor=actor, now=now)


def revoke(token: ApiToken, *, actor: Principal | None, reason: str = "", now: datetime | None = None) -> ApiToken:
    """Revoke a token (compare-and-set, so two revocations write one audit event) and audit it as
    `token.revoked`. Revoking a revoked token is a 409 `invalid_state`. No permission check (revoke_for)."""
    now = now or timezone.now()
    reason = reason.strip()
    problems = validation.text_problems(reason)
    if len(reason) > REASON_MAX_LENGTH:
        problems.append(f"At most {REASON_MAX_LENGTH} characters.")
    if problems:
        raise InvalidInput({"reason": problems})
    # Before: active or expired (a revoked token stops at the compare-and-set); after: revoked.
    with (
        transaction.atomic(),
        audit.changing(
            token,
            tenant=token.principal.tenant_pk,
            object_type="token",
            object_id=str(token.pk),
            snapshot_of=lambda t: {**_snapshot(t), "state": t.state(now).value},
            actor=actor,
            action=audit.Action.TOKEN_REVOKED,
            reason=reason,
            at=now,
        ),
    ):
        if not token.revoke(by=actor, reason=reason, now=now):
            raise InvalidState(f"Token {token.prefix}… ({token.name}) was revoked already.")
    return token


def revoke_for(actor: Principal, token_id: int | str, *, reason: str = "", now: datetime | None = None) -> ApiToken:
    """An admin revokes one of the tenant's tokens (any principal's: taking access away is always allowed)."""
    return revoke(token_of(actor, token_id), actor=actor, reason=reason, now=now)
