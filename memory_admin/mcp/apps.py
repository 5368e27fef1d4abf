from __future__ import annotations

from django.apps import AppConfig


class McpConfig(AppConfig):
    """The MCP door (tools over streamable HTTP at /mcp/ and `manage.py mcp` over stdio). It has no models; it is
    an app so that its command lives beside its server, not in another door."""

    name = "memory_admin.mcp"
    label = "mcp"
