from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memory_admin.accounts.models import ApiToken


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`; one principal per token."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Token is not valid text.") from None
        token = ApiToken.objects.authenticate(raw)
        if token is None or not token.principal.is_active:
            raise exceptions.AuthenticationFailed("Unknown or revoked token.")
        return token.principal, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
