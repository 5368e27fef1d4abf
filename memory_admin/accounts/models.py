"""Tenants, the principals (humans and agents) acting in them, and the agents' API tokens."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Protocol, cast

from django.contrib.auth.models import AbstractUser, UserManager
from django.core.exceptions import PermissionDenied
from django.db import connection, models
from django.utils import timezone

from memory_admin.lib import rows


class Tenant(models.Model):
    """An organisation. Every memory row carries its tenant; nothing crosses tenants."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    time_zone = models.CharField(max_length=64, default="UTC")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    COMPLIANCE = "compliance", "Compliance"
    ADMIN = "admin", "Admin"
    AGENT = "agent", "Agent"


# Roles that may assert facts in a tenant's projects (field policies can narrow this per field).
WRITER_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.AGENT})
# Roles that may curate records: exclude, expire, resolve disputes.
CURATOR_ROLES = frozenset({Role.OWNER, Role.ADMIN})


class PrincipalManager(UserManager["Principal"]):
    pass


class Principal(AbstractUser):
    """A human user or an agent. Humans sign in with a password; agents use API tokens.

    `username` is the global login (`name@tenant`); `name` is how field policies refer to the
    principal inside its tenant.
    """

    class Kind(models.TextChoices):
        HUMAN = "human", "Human"
        AGENT = "agent", "Agent"

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="principals",
    )
    name = models.CharField(max_length=150, blank=True)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.HUMAN)
    roles = models.JSONField(default=list, blank=True)

    objects = PrincipalManager()  # type: ignore[misc]

    class Meta:
        constraints = [
            # create_principal and field policies look principals up by (tenant, name).
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=~models.Q(name=""),
                name="principal_unique_name_per_tenant",
            ),
        ]

    def has_role(self, *roles: str) -> bool:
        return any(role in self.roles for role in roles)

    @property
    def can_write(self) -> bool:
        return self.has_role(*WRITER_ROLES)

    @property
    def can_curate(self) -> bool:
        return self.has_role(*CURATOR_ROLES)

    # `tenant` is nullable only for site superusers of the Django admin. Every door admits principals in a
    # tenant alone (IsTenantMember, the dashboard's member_required), so the domain reads these two, typed
    # without None; a principal without a tenant that still got this far is refused (403), never a 500.
    @property
    def tenant_pk(self) -> int:
        if self.tenant_id is None:
            raise PermissionDenied("This principal belongs to no tenant.")
        return self.tenant_id

    @property
    def require_tenant(self) -> Tenant:
        if self.tenant is None:
            raise PermissionDenied("This principal belongs to no tenant.")
        return self.tenant

    def __str__(self) -> str:
        return self.username


class _HasUser(Protocol):
    user: Any


def principal_of(request: _HasUser) -> Principal:
    """The principal of a request (a dashboard HttpRequest or an API Request) that a door has admitted: the
    door's check (member_required, IsTenantMember) is what makes `request.user` a Principal."""
    return cast(Principal, request.user)


def _hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


# A token's `last_used_at` is written at most once per this interval: authentication then costs a write
# per token per minute, not one per request (a conditional UPDATE ... WHERE last_used_at < now - interval,
# so concurrent requests race harmlessly). "Last used" is therefore exact to within this interval.
LAST_USED_RESOLUTION = timedelta(seconds=60)
# The non-secret head of a token shown to people ("mga_" and 8 random characters): enough to tell tokens
# apart, far too little to guess the rest (the token carries 256 random bits).
PREFIX_LENGTH = 12


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def for_tenant(self, tenant_id: int) -> ApiTokenQuerySet:
        """The tenant's tokens with what a list shows of them (one query)."""
        return self.filter(principal__tenant_id=tenant_id).select_related("principal", "created_by", "revoked_by")


class ApiTokenManager(models.Manager["ApiToken"]):
    def get_queryset(self) -> ApiTokenQuerySet:
        return ApiTokenQuerySet(self.model, using=self._db)

    def for_tenant(self, tenant_id: int) -> ApiTokenQuerySet:
        return self.get_queryset().for_tenant(tenant_id)

    def issue(
        self,
        principal: Principal,
        name: str = "",
        *,
        expires_at: datetime | None = None,
        created_by: Principal | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token and return it with its raw value, which is never stored or shown again."""
        raw = "mga_" + secrets.token_urlsafe(32)
        token = self.create(
            principal=principal,
            key_hash=_hash_token(raw),
            prefix=raw[:PREFIX_LENGTH],
            name=name,
            expires_at=expires_at,
            created_by=created_by,
        )
        return token, raw

    def lookup(self, raw: str) -> ApiToken | None:
        """The token with this raw value, whatever its state (the caller says why it is refused), with its
        principal and the principal's tenant; read from the database on every call: nothing caches it, so a
        revocation or expiry holds from the next request.

        One statement built once per backend, its rows loaded by lib.rows: every API request makes this lookup,
        and compiling `select_related(...).filter(...).first()` on each cost 1.67 ms of CPU per lookup; 0.25 ms
        in this form (both measured while the machine was busy)."""
        with connection.cursor() as cursor:
            cursor.execute(_lookup_sql(connection.vendor), [_hash_token(raw)])
            row = cursor.fetchone()
        if row is None:
            return None
        after_token = len(ApiToken._meta.concrete_fields)
        token = rows.load(ApiToken, row)
        principal = rows.load(Principal, row[after_token:])
        if principal.tenant_id is not None:
            principal.tenant = rows.load(Tenant, row[after_token + len(Principal._meta.concrete_fields) :])
        token.principal = principal
        return token


@cache
def _lookup_sql(vendor: str) -> str:
    """`ApiTokenManager.lookup`'s statement: the token, its principal and the principal's tenant (if any)."""
    q = connection.ops.quote_name
    return (
        f"SELECT {rows.select_list(ApiToken, 't')}, {rows.select_list(Principal, 'p')},"
        f" {rows.select_list(Tenant, 'n')} FROM {q(ApiToken._meta.db_table)} t"
        f" JOIN {q(Principal._meta.db_table)} p ON p.id = t.principal_id"
        f" LEFT JOIN {q(Tenant._meta.db_table)} n ON n.id = p.tenant_id WHERE t.key_hash = %s"
    )


class ApiToken(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        EXPIRED = "expired", "Expired"
        REVOKED = "revoked", "Revoked"

    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="tokens")
    # Only a SHA-256 of the token is kept; `prefix` lets a person tell tokens apart.
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        Principal, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", help_text="null: a command"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(Principal, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    revoke_reason = models.CharField(max_length=2000, blank=True)

    objects = ApiTokenManager()

    def __str__(self) -> str:
        return f"{self.prefix}… {self.name} ({self.principal})"

    def state(self, now: datetime | None = None) -> ApiToken.State:
        if self.revoked_at is not None:
            return ApiToken.State.REVOKED
        if self.expires_at is not None and self.expires_at <= (now or timezone.now()):
            return ApiToken.State.EXPIRED
        return ApiToken.State.ACTIVE

    def revoke(self, *, by: Principal | None = None, reason: str = "", now: datetime | None = None) -> bool:
        """Revoke by compare-and-set: True if this call revoked it, False if it was revoked already."""
        now = now or timezone.now()
        changed = ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=by, revoke_reason=reason
        )
        if changed:
            self.revoked_at, self.revoked_by, self.revoke_reason = now, by, reason
        return bool(changed)

    def touch(self, now: datetime | None = None) -> None:
        """Record a use, at most once per LAST_USED_RESOLUTION (see there)."""
        now = now or timezone.now()
        if self.last_used_at is not None and self.last_used_at > now - LAST_USED_RESOLUTION:
            return  # fresh enough: no write at all
        ApiToken.objects.filter(pk=self.pk).filter(
            models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        self.last_used_at = now
