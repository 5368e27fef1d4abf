"""Tenants, the principals (humans and agents) acting in them, and the agents' API tokens."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Protocol, cast

from django.contrib.auth.models import AbstractUser, UserManager
from django.core.exceptions import PermissionDenied
from django.db import models
from django.utils import timezone


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


class ApiTokenManager(models.Manager["ApiToken"]):
    def issue(self, principal: Principal, label: str = "") -> tuple[ApiToken, str]:
        """Create a token and return it with its raw value, which is never stored or shown again."""
        raw = "mga_" + secrets.token_urlsafe(32)
        token = self.create(principal=principal, key_hash=_hash_token(raw), prefix=raw[:10], label=label)
        return token, raw

    def authenticate(self, raw: str) -> ApiToken | None:
        return (
            self.select_related("principal", "principal__tenant")
            .filter(key_hash=_hash_token(raw), revoked_at__isnull=True)
            .first()
        )


class ApiToken(models.Model):
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="tokens")
    # Only a SHA-256 of the token is kept; `prefix` lets a person tell tokens apart.
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=10)
    label = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenManager()

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.principal})"

    def revoke(self, **_: Any) -> None:
        ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
