"""The record list read as plain rows: what `GET /api/v1/records/` pages over (issue 36, item 1).

`RecordRows` is the record list of a `RecordFilter` in the shape DRF's cursor pagination pages over (it orders,
filters by the cursor's position and slices; nothing else), but each page is one statement compiled once per
process and per shape of the list (which filters, which order, before or after a position: lib.prepared's
`PreparedRows`), and its rows are plain tuples of `shapes.ROW_COLUMNS`, written to JSON by `shapes.row_json`.
The queryset each shape compiles is built by the same code as always: `RecordFilter.apply` on the tenant's
records, the supersession links and timestamps as text of `shapes.row_columns`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

from django.db.models import Field, Model, QuerySet
from django.utils import timezone

from memory_admin.lib.prepared import PreparedRows
from memory_admin.memory.filters import RecordFilter
from memory_admin.memory.models import MemoryRecord, Project
from memory_admin.memory.shapes import ROW_COLUMNS, row_columns

# The filters a row list takes (RecordFilter's attributes; the API door's), in a fixed order.
FILTERS = ("status", "project", "subject", "predicate", "valid_at", "known_at")


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    return cast("Field[Any, Any]", model._meta.get_field(name))


def _build(shape: Any, **values: Any) -> QuerySet[Any]:
    filters: tuple[str, ...] = shape[0]
    ordering: tuple[str, ...] = shape[1]
    position: str | None = shape[2]
    tenant = values["tenant"]
    wanted = RecordFilter(**{name: values[name] for name in filters})
    records = wanted.apply(MemoryRecord.objects.for_tenant(tenant), tenant)
    ordered = row_columns(records).order_by(*ordering)
    if position is not None:
        ordered = ordered.filter(**{f"id__{position}": values["position"]})
    return ordered.values_list(*ROW_COLUMNS)


_ROWS = PreparedRows(
    _build,
    sentinels={
        "tenant": -7_391_004_217,
        "position": -7_391_004_219,
        "status": "<rows status>",
        "project": "<rows project>",
        "subject": "<rows subject>",
        "predicate": "<rows predicate>",
        "valid_at": datetime(1903, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
        "known_at": datetime(1904, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
    },
    fields={
        "tenant": _field(MemoryRecord, "tenant"),
        "position": _field(MemoryRecord, "id"),
        "status": _field(MemoryRecord, "status"),
        "project": _field(Project, "key"),
        "subject": _field(MemoryRecord, "subject_id"),
        "predicate": _field(MemoryRecord, "predicate"),
        "valid_at": _field(MemoryRecord, "valid_from"),
        "known_at": _field(MemoryRecord, "recorded_from"),
    },
)


class Row(tuple[Any, ...]):
    """A row of `ROW_COLUMNS`; `id` is what the cursor pagination reads of it."""

    __slots__ = ()

    @property
    def id(self) -> int:
        return int(self[0])


@dataclass(frozen=True)
class RecordRows:
    """The records of `tenant_id` that `wanted` lists, as DRF's CursorPagination uses a queryset: `order_by`
    (by id), `filter(id__lt=...)` / `filter(id__gt=...)`, then one slice, which runs the statement."""

    wanted: RecordFilter
    tenant_id: int
    ordering: tuple[str, ...] = ("-id",)
    position: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        unsupported = [name for name in ("freshness", "source", "q") if getattr(self.wanted, name) is not None]
        if unsupported:  # the dashboard's filters: its page reads model rows (dashboard/views)
            raise ValueError(f"record rows do not filter by {unsupported}")

    def order_by(self, *ordering: str) -> RecordRows:
        if ordering not in (("-id",), ("id",)):
            raise ValueError(f"record rows are ordered by id only, not {ordering}")
        return replace(self, ordering=ordering)

    def filter(self, **lookup: Any) -> RecordRows:
        ((name, value),) = lookup.items()
        if name not in ("id__lt", "id__gt"):
            raise ValueError(f"record rows are filtered by position only, not {name}")
        return replace(self, position=(name.removeprefix("id__"), int(value)))

    def __getitem__(self, window: slice) -> list[Row]:
        offset = window.start or 0
        if window.stop is None or window.step is not None or offset < 0:
            raise ValueError("record rows are read a page at a time")
        values: dict[str, Any] = {"tenant": self.tenant_id}
        for name in FILTERS:
            value = getattr(self.wanted, name)
            if value is not None:
                values[name] = value
        if "valid_at" in values or "known_at" in values:  # as RecordFilter.apply: the other instant is now
            now = timezone.now()
            values.setdefault("valid_at", now)
            values.setdefault("known_at", now)
        filters = tuple(name for name in FILTERS if name in values)
        if self.position is not None:
            values["position"] = self.position[1]
        shape = (filters, self.ordering, self.position[0] if self.position else None)
        rows = _ROWS.rows(MemoryRecord, shape, values, window.stop - offset, offset)
        return [Row(row) for row in rows]
