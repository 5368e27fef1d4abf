from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memory_admin.accounts import tenancy
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
        # Looked up on every request, never cached: a revocation or an expiry holds from the next request.
        token = ApiToken.objects.lookup(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown token.")
        now = timezone.now()
        state = token.state(now)
        if state == ApiToken.State.REVOKED:
            raise exceptions.AuthenticationFailed("Token revoked.")
        if state == ApiToken.State.EXPIRED:
            raise exceptions.AuthenticationFailed("Token expired.")
        if not token.principal.is_active:
            raise exceptions.AuthenticationFailed("The token's principal is deactivated.")
        # The rest of the request acts for the token's tenant under row-level security; the request scope
        # (dashboard.middleware.TenantContextMiddleware) restores the previous value when the request ends.
        tenancy.activate(token.principal.tenant_id)
        token.touch(now)  # at most one write per token per minute (accounts.models.LAST_USED_RESOLUTION)
        return token.principal, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
