from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.accounts.models import Role
from memory_admin.accounts.services import ensure_principal, issue_token


class Command(BaseCommand):
    help = "Create a tenant and principal as needed, and print a new API token on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug, created if missing")
        parser.add_argument("--name", required=True, help="principal name inside the tenant")
        parser.add_argument("--role", action="append", required=True, choices=Role.values, dest="roles")
        parser.add_argument("--password", help="login password (humans); checked by AUTH_PASSWORD_VALIDATORS")

    def handle(
        self,
        *args: Any,
        tenant: str,
        name: str,
        roles: list[str],
        password: str | None,
        **_: Any,
    ) -> None:
        try:
            principal = ensure_principal(tenant, name, roles, password=password)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError("The password is refused: " + " ".join(exc.messages)) from None
        token = issue_token(principal, label="create_principal")
        self.stdout.write(f"{principal.kind} {principal.username} roles={','.join(principal.roles)}")
        self.stdout.write("API token (shown once):")
        self.stdout.write(token)
