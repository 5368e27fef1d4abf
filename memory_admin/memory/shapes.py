"""The record format of PRODUCT.md as plain data: the one shape the API renders, exports write and error
answers carry. Domain code (exports) uses it from here; the API's serializers describe it for the schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F, JSONField, OuterRef, QuerySet, Subquery

from memory_admin.memory.models import MemoryRecord

# What `record_payload` reads of a record's own row (`payload_columns` loads these and nothing else).
PAYLOAD_FIELDS = (
    "id",
    "memory_id",
    "subject_id",
    "predicate",
    "value",
    "status",
    "status_reason",
    "valid_from",
    "valid_to",
    "recorded_from",
    "recorded_to",
    "last_verified_at",
    "recheck_after",
    "retain_until",
    "revision",
    "source_canonical_ref",
    "source_revision",
    "derived_from",
    "source_event_ids",
)
# The columns `payload_columns` adds for what `record_payload` renders of other rows.
_LINKED = {
    "payload_project_key": "project__key",
    "payload_issuer_name": "issuer__name",
    "payload_issuer_username": "issuer__username",
    "payload_superseded_by": "superseded_by__memory_id",
}
_SUPERSEDES = "payload_supersedes"


class MemoryIds(Subquery):
    """The `memory_id`s of a subquery's rows, in its order, as one JSON array column (`[]` for none): a list
    of links read with its rows, instead of a second query per page."""

    output_field = JSONField()

    def __init__(self, queryset: QuerySet[MemoryRecord], **kwargs: Any) -> None:
        super().__init__(queryset.values("memory_id"), **kwargs)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        return self.as_sql(compiler, connection, template="to_jsonb(ARRAY(%(subquery)s))", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        # The ordered rows in a derived table: json_group_array keeps their order (SQLite < 3.44 has no
        # ORDER BY inside an aggregate).
        template = '(SELECT json_group_array("memory_id") FROM (%(subquery)s))'
        return self.as_sql(compiler, connection, template=template, **extra)


def payload_columns(records: QuerySet[MemoryRecord]) -> QuerySet[MemoryRecord]:
    """`records` with what `record_payload` renders and nothing more, in one query: the row's rendered
    columns, and as columns of it (no model instances) its project's key, its issuer's names, its successor's
    `memory_id` and the `memory_id`s of the records it supersedes, oldest first. Loading the relations instead
    builds three more model instances per record, decodes every column of the issuer (timestamps the record
    format does not carry) and takes a second query for the superseded records.
    Reading any other field of these records loads it, one query per record: they are for rendering only."""
    older = MemoryRecord.objects.filter(superseded_by=OuterRef("pk")).order_by("id")
    return records.only(*PAYLOAD_FIELDS).annotate(
        **{name: F(path) for name, path in _LINKED.items()}, **{_SUPERSEDES: MemoryIds(older)}
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def source_payload(record: MemoryRecord) -> dict[str, Any]:
    """Where a record's value came from; the issuer is the authenticated principal that wrote it."""
    if _SUPERSEDES in record.__dict__:  # read by `payload_columns`
        name, username = record.payload_issuer_name, record.payload_issuer_username  # type: ignore[attr-defined]
    else:
        name, username = record.issuer.name, record.issuer.username
    return {
        "canonical_ref": record.source_canonical_ref,
        "revision": record.source_revision,
        "issuer_principal_id": name or username,
        "event_ids": record.source_event_ids,
    }


def record_payload(record: MemoryRecord) -> dict[str, Any]:
    """The record format of PRODUCT.md, every field. What it renders of other rows (project, successor, the
    superseded records) comes from the columns `payload_columns` adds when the record was read with them,
    else from its relations."""
    linked = record.__dict__
    if _SUPERSEDES in linked:
        project_key = linked["payload_project_key"]
        supersedes = linked[_SUPERSEDES]
        superseded_by = linked["payload_superseded_by"]
    else:
        project_key = record.project.key
        supersedes = [older.memory_id for older in record.supersedes.all()]
        superseded_by = record.superseded_by.memory_id if record.superseded_by else None
    return {
        "memory_id": record.memory_id,
        "project_id": project_key,
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
        "supersedes": supersedes,
        "superseded_by": superseded_by,
        "derived_from": record.derived_from,
        "status_reason": record.status_reason,
    }
