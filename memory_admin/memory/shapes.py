"""The record format of PRODUCT.md as plain data: the one shape the API renders, exports write and error
answers carry. Domain code (exports) uses it from here; the API's serializers describe it for the schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memory_admin.memory.models import MemoryRecord


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def source_payload(record: MemoryRecord) -> dict[str, Any]:
    """Where a record's value came from; the issuer is the authenticated principal that wrote it."""
    return {
        "canonical_ref": record.source_canonical_ref,
        "revision": record.source_revision,
        "issuer_principal_id": record.issuer.name or record.issuer.username,
        "event_ids": record.source_event_ids,
    }


def record_payload(record: MemoryRecord) -> dict[str, Any]:
    """The record format of PRODUCT.md, every field."""
    return {
        "memory_id": record.memory_id,
        "project_id": record.project.key,
        "subject_id": record.subject_id,
        "predicate": record.predicate,
        "value": record.value,
        "status": record.status,
        "valid_from": _iso(record.valid_from),
        "valid_to": _iso(record.valid_to),
        "recorded_from": _iso(record.recorded_from),
        "recorded_to": _iso(record.recorded_to),
        "last_verified_at": _iso(record.last_verified_at),
        "recheck_after": _iso(record.recheck_after),
        "retain_until": _iso(record.retain_until),
        "revision": record.revision,
        "source": source_payload(record),
        "supersedes": [older.memory_id for older in record.supersedes.all()],
        "superseded_by": record.superseded_by.memory_id if record.superseded_by else None,
        "derived_from": record.derived_from,
        "status_reason": record.status_reason,
    }
