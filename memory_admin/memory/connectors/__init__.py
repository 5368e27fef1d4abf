"""Canonical-source connectors, by name (`CONNECTORS`).

The built-ins are listed in `_builtins` below, one line per connector, in the order the policy form offers
them. Adding a connector is adding one module here and one line there (an app above memory registers its own
with `CONNECTORS.register(TheirConnector)` in its `AppConfig.ready()`). The policy form, the validation and
the rechecks read the registry.
"""

from __future__ import annotations

from typing import Any

from memory_admin.lib.registry import Registry
from memory_admin.memory.connectors.base import (
    CannotFetch,
    Connector,
    FactKey,
    Observation,
    SettingField,
    SourceAmbiguous,
    SourceUnavailable,
)


def _builtins(connectors: Registry[type[Connector]]) -> None:
    """The built-in connectors, in the order the policy form offers them."""
    from memory_admin.memory.connectors import http_json, manual

    connectors.register(http_json.HttpJsonConnector)
    connectors.register(manual.ManualConnector)


def _check(connector: type[Connector]) -> None:
    if not (isinstance(connector, type) and issubclass(connector, Connector)):
        raise ValueError(f"{connector!r} is not a canonical-source connector (a subclass of Connector).")


CONNECTORS: Registry[type[Connector]] = Registry(
    "canonical-source connector", key=lambda connector: connector.name, builtins=_builtins, check=_check
)

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
