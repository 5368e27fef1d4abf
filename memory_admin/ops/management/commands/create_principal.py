from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from memory_admin.accounts.models import Role
from memory_admin.accounts.services import ensure_principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory import tokens
from memory_admin.memory.errors import DomainError

# A token may live a century at most (the longest duration the product accepts anywhere).
MAX_EXPIRY_DAYS = 36_600


class Command(BaseCommand):
    help = "Create a tenant and principal as needed, and print a new API token on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug, created if missing")
        parser.add_argument("--name", required=True, help="principal name inside the tenant")
        parser.add_argument("--role", action="append", required=True, choices=Role.values, dest="roles")
        parser.add_argument("--password", help="login password (humans); checked by AUTH_PASSWORD_VALIDATORS")
        parser.add_argument("--token-name", default="create_principal", help="the new token's name")
        parser.add_argument(
            "--expires-in-days", type=int, default=None, help="the token expires after this many days (default never)"
        )

    def handle(
        self,
        *args: Any,
        tenant: str,
        name: str,
        roles: list[str],
        password: str | None,
        token_name: str,
        expires_in_days: int | None,
        **_: Any,
    ) -> None:
        if expires_in_days is not None and not 1 <= expires_in_days <= MAX_EXPIRY_DAYS:
            raise CommandError(f"--expires-in-days must be from 1 to {MAX_EXPIRY_DAYS}.")
        try:
            principal = ensure_principal(tenant, name, roles, password=password)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError("The password is refused: " + " ".join(exc.messages)) from None
        now = timezone.now()
        expires_at = now + timedelta(days=expires_in_days) if expires_in_days is not None else None
        try:
            with tenant_context(principal.tenant_id):  # the audit event is the tenant's row
                token, raw = tokens.issue(
                    principal, name=token_name, expires_at=expires_at, actor=None, reason="create_principal", now=now
                )
        except DomainError as exc:
            raise CommandError(f"{exc.detail} {exc.extra.get('errors', '')}".strip()) from None
        self.stdout.write(f"{principal.kind} {principal.username} roles={','.join(principal.roles)}")
        expiry = f"expires {token.expires_at.isoformat()}" if token.expires_at else "never expires"
        self.stdout.write(f"API token {token.prefix}… '{token.name}' ({expiry}), shown once:")
        self.stdout.write(raw)
