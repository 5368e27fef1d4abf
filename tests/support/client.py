"""The Python client's callers (integrations/python, `memory_governance`): each persona of the acme tenant with a
token and a client on the live server."""

from __future__ import annotations

from typing import Any

from memory_governance import Client

from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import ensure_principal, issue_token


class Personas:
    """Each persona of the acme tenant, with a client on the live server."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.principals: dict[str, Principal] = {}
        self.tokens: dict[str, str] = {}

    def token(self, name: str, role: str, tenant: str = "acme") -> str:
        if name not in self.tokens:
            self.principals[name] = ensure_principal(tenant, name, [role], password=None, validate=False)
            self.tokens[name] = issue_token(self.principals[name])
        return self.tokens[name]

    def client(self, name: str, role: str = "agent", **kwargs: Any) -> Client:
        return Client(self.base_url, self.token(name, role), **kwargs)
