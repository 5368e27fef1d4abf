"""Creating tenants and principals: used by create_principal, seed_demo and the tests."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth import password_validation
from django.db import transaction
from django.utils.text import slugify

from memory_admin.accounts.models import ApiToken, Principal, Role, Tenant


def ensure_principal(
    tenant_slug: str,
    name: str,
    roles: Iterable[str],
    *,
    password: str | None = None,
    tenant_name: str | None = None,
    validate: bool = True,
) -> Principal:
    """The principal `name` of tenant `tenant_slug` with exactly these roles, created as needed.

    A principal holding only the agent role is an agent (no password login); anyone else is a human.
    Admins may use the Django admin (staff) for their own tenant.
    A password goes through AUTH_PASSWORD_VALIDATORS (django.core.exceptions.ValidationError when weak);
    `validate=False` is for seeded test and demo people only, whose passwords are documented anyway.
    """
    roles = sorted(set(roles))
    unknown = set(roles) - set(Role.values)
    if not roles or unknown:
        raise ValueError(f"roles must be among {', '.join(Role.values)}; got {roles}")
    if name == "canonical-source":
        raise ValueError("'canonical-source' is reserved for the recheck engine")
    if slugify(tenant_slug) != tenant_slug:
        raise ValueError(f"tenant must be a slug (lowercase letters, digits, hyphens); got {tenant_slug!r}")
    with transaction.atomic():
        tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_name or tenant_slug})
        principal = Principal.objects.filter(tenant=tenant, name=name).first()
        if principal is None:
            principal = Principal(tenant=tenant, name=name, username=f"{name}@{tenant_slug}")
        principal.roles = roles
        principal.kind = Principal.Kind.AGENT if roles == [Role.AGENT] else Principal.Kind.HUMAN
        principal.is_staff = Role.ADMIN in roles
        if password:
            if validate:
                # Checked against the principal as it will be saved (its username and name count as
                # attributes a password must not resemble); nothing is written when it is refused.
                password_validation.validate_password(password, user=principal)
            principal.set_password(password)
        elif principal.pk is None:
            principal.set_unusable_password()
        principal.save()
    return principal


def issue_token(
    principal: Principal,
    name: str = "",
    *,
    expires_at: datetime | None = None,
    created_by: Principal | None = None,
) -> str:
    """A new token's raw value (shown once; only its hash is kept). Not audited: the doors issue tokens through
    memory.tokens, which validates and audits; this is for the tests, the demo and the benchmarks."""
    return create_token(principal, name, expires_at=expires_at, created_by=created_by)[1]


def create_token(
    principal: Principal,
    name: str = "",
    *,
    expires_at: datetime | None = None,
    created_by: Principal | None = None,
) -> tuple[ApiToken, str]:
    """The token row and its raw value; a blank name becomes "token-<id>" (every token has a name)."""
    with transaction.atomic():
        token, raw = ApiToken.objects.issue(principal, name, expires_at=expires_at, created_by=created_by)
        if not name:
            token.name = f"token-{token.pk}"
            token.save(update_fields=["name"])
    return token, raw
