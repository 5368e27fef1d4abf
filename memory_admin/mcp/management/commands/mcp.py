from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.http import HttpRequest
from rest_framework import exceptions

from memory_admin.accounts.auth import BearerTokenAuthentication
from memory_admin.accounts.models import ApiToken, Principal
from memory_admin.mcp.server import Caller, acting_as
from memory_admin.mcp.stdio import serve_stdio


def authenticate(token: str) -> tuple[Principal, ApiToken | None]:
    """The API's token check, run again before every call: a revoked or expired token stops at its next call."""
    request = HttpRequest()  # what the API's bearer authentication reads of a request: its Authorization header
    request.META["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    found = BearerTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    if found is None:
        raise exceptions.AuthenticationFailed("No token.")
    return found


class Command(BaseCommand):
    help = (
        "Serve the MCP server over stdio for a desktop client (Claude Desktop, Cursor, ...), acting as the agent "
        "whose API token is given (--token, or the MEMORY_GOVERNANCE_TOKEN environment variable)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--token", default=None, help="the agent's API token (default: $MEMORY_GOVERNANCE_TOKEN)")

    def handle(self, *args: Any, token: str | None, **options: Any) -> None:
        token = token or os.environ.get("MEMORY_GOVERNANCE_TOKEN", "")
        if not token:
            raise CommandError("Give the agent's API token: --token TOKEN (or MEMORY_GOVERNANCE_TOKEN).")
        try:
            authenticate(token)
        except exceptions.AuthenticationFailed as exc:
            raise CommandError(f"The token is refused: {exc.detail}") from None
        # stdout is the protocol's channel from here on: nothing else may be printed to it.
        with acting_as(Caller(authenticate=lambda: authenticate(token), transport="stdio")):
            serve_stdio()  # each line through the guarded JSON reader first (mcp/stdio.py)
