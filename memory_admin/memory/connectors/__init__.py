"""Canonical-source connectors, by name. Adding a connector is adding one module and one line here."""

from __future__ import annotations

from typing import Any

from memory_admin.memory.connectors.base import (
    CannotFetch,
    Connector,
    FactKey,
    Observation,
    SettingField,
    SourceAmbiguous,
    SourceUnavailable,
)
from memory_admin.memory.connectors.http_json import HttpJsonConnector
from memory_admin.memory.connectors.manual import ManualConnector

CONNECTORS: dict[str, type[Connector]] = {c.name: c for c in (HttpJsonConnector, ManualConnector)}

__all__ = [
    "CONNECTORS",
    "CannotFetch",
    "Connector",
    "FactKey",
    "Observation",
    "SettingField",
    "SourceAmbiguous",
    "SourceUnavailable",
    "connector_for",
    "validate_source",
]


def validate_source(source: Any, tenant_id: int | None = None) -> list[str]:
    """Problems with a policy's `canonical_source`, as sentences for a person (empty when valid)."""
    if source is None:
        return []
    names = ", ".join(f"'{n}'" for n in CONNECTORS)
    if not isinstance(source, dict) or "connector" not in source:
        return [f'Give null or an object with a "connector" ({names}).']
    connector = source["connector"]
    cls = CONNECTORS.get(connector) if isinstance(connector, str) else None  # {} or [] as a name: refused, not a 500
    if cls is None:
        return [f"Unknown connector {source['connector']!r}; use one of {names}."]
    return cls.validate(source, tenant_id=tenant_id)


def connector_for(source: dict[str, Any] | None, tenant_id: int | None = None) -> Connector | None:
    if not source or source.get("connector") not in CONNECTORS:
        return None
    return CONNECTORS[source["connector"]](source, tenant_id)
