"""Reads of the derived stores that pages show (agents' notices, exports), each in a fixed number of queries
whatever the number of rows. Selectors only read; they import nothing above the derived layer."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Min

from memory_admin.derived.models import Event, ExportFile, Invalidation


def open_notices_by_agent(tenant_id: int, *, limit: int = 10) -> list[dict[str, Any]]:
    """Agents with notices not yet applied, the longest waiting first: `agent__name`, `n` and `oldest`."""
    return [
        dict(row)
        for row in Invalidation.objects.filter(tenant_id=tenant_id, acknowledged_at__isnull=True)
        .values("agent__name")
        .annotate(n=Count("id"), oldest=Min("created_at"))
        .order_by("oldest")[:limit]
    ]


def open_notices(tenant_id: int, *, limit: int = 500) -> list[Invalidation]:
    """Notices not yet applied, oldest first, with their agent, context load, record and successor."""
    return list(
        Invalidation.objects.filter(tenant_id=tenant_id, acknowledged_at__isnull=True)
        .select_related("agent", "load", "record", "successor")
        .order_by("created_at")[:limit]
    )


def export_files(tenant_id: int, *, limit: int = 100) -> list[ExportFile]:
    """The tenant's export files still on disk, newest first, with their projects."""
    return list(
        ExportFile.objects.filter(tenant_id=tenant_id, removed_at__isnull=True)
        .select_related("project")
        .order_by("-id")[:limit]
    )


def sessions_of_events(tenant_id: int, event_ids: list[str], *, limit: int = 500) -> dict[str, str]:
    """The conversation session of each raw event (by public id) that is still visible: where a record's claim was
    made (its `source.event_ids`). One query; hidden (deleted) events are left out."""
    wanted = [i for i in dict.fromkeys(event_ids) if isinstance(i, str)][:limit]
    if not wanted:
        return {}
    rows = Event.objects.filter(tenant_id=tenant_id, public_id__in=wanted, hidden_at__isnull=True)
    return dict(rows.values_list("public_id", "session_id"))
