from __future__ import annotations

from memory_admin.memory.connectors.base import Connector


class ManualConnector(Connector):
    """A person verifies in the dashboard: "still true", "changed to …" or "cannot tell"."""

    name = "manual"
    label = "Manual (a person verifies)"
    can_fetch = False
