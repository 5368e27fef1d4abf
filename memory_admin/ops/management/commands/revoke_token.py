from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.accounts.models import ApiToken
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory import tokens
from memory_admin.memory.errors import DomainError


class Command(BaseCommand):
    help = "Revoke an API token of a tenant, named by its id or its prefix (as the Tokens page shows them); audited."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--id", dest="token_id", help="the token's id")
        which.add_argument("--prefix", help="the token's prefix (its first characters, e.g. mga_AbCd1234)")
        parser.add_argument("--reason", default="", help="why (kept in the audit log)")

    def handle(self, *args: Any, tenant: str, token_id: str | None, prefix: str | None, reason: str, **_: Any) -> None:
        found = ApiToken.objects.filter(principal__tenant__slug=tenant).select_related("principal")
        if token_id is not None:
            if not (token_id.isascii() and token_id.isdigit() and int(token_id) < 2**63):
                raise CommandError("--id must be a token id (digits).")
            found = found.filter(pk=int(token_id))
        else:
            # The prefix a person copies may be shorter than the stored one, never longer.
            if not prefix or len(prefix) < 6:
                raise CommandError("--prefix needs at least 6 characters.")
            found = found.filter(prefix__startswith=prefix) if len(prefix) <= 16 else found.none()
        # Compared again here: SQLite's LIKE ignores case, and prefixes are case-sensitive.
        matches = [t for t in found[:50] if token_id is not None or t.prefix.startswith(prefix or "")][:2]
        if not matches:
            raise CommandError(f"No token of tenant {tenant!r} matches.")
        if len(matches) > 1:
            raise CommandError("Several tokens match that prefix; give --id (the Tokens page shows ids).")
        token = matches[0]
        try:
            with tenant_context(token.principal.tenant_id):  # --tenant: the audit event is that tenant's row
                tokens.revoke(token, actor=None, reason=reason or "revoke_token command")
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(f"Revoked token {token.pk} {token.prefix}… '{token.name}' of {token.principal.username}.")
