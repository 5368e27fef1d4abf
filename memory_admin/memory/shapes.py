"""The record format of PRODUCT.md as plain data: the one shape the API renders, exports write and error
answers carry. Domain code (exports) uses it from here; the API's serializers describe it for the schema."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any

from django.db.models import F, Func, JSONField, OuterRef, QuerySet, Subquery, TextField

from memory_admin.lib import keystore, sealing
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


# --- The same format from row tuples ------------------------------------------------------------------------
# A page of the record list is read as plain rows (`ROW_COLUMNS`, in this order; memory.record_rows) and written
# straight to JSON text by `row_json`: no model instance, no JSON decode of a stored value that is already in the
# form the answer prints. tests/api/test_record_rows.py holds `row_json` to `record_payload` byte for byte.

# The keys of the record format, in order: `record_payload`'s dict and `row_json`'s text both follow it.
RECORD_KEYS = (
    "memory_id",
    "project_id",
    "subject_id",
    "predicate",
    "value",
    "status",
    "valid_from",
    "valid_to",
    "recorded_from",
    "recorded_to",
    "last_verified_at",
    "recheck_after",
    "retain_until",
    "revision",
    "source",
    "supersedes",
    "superseded_by",
    "derived_from",
    "status_reason",
)
SOURCE_KEYS = ("canonical_ref", "revision", "issuer_principal_id", "event_ids")

# What a row holds, by `values_list` path (`payload_supersedes` and the `iso_` timestamps are the annotations
# `row_columns` adds). The position of each is the constant below it.
ROW_COLUMNS = (
    "id",
    "memory_id",
    "project__key",
    "subject_id",
    "predicate",
    "value",
    "status",
    "iso_valid_from",
    "iso_valid_to",
    "iso_recorded_from",
    "iso_recorded_to",
    "iso_last_verified_at",
    "iso_recheck_after",
    "iso_retain_until",
    "revision",
    "source_canonical_ref",
    "source_revision",
    "issuer__name",
    "issuer__username",
    "source_event_ids",
    _SUPERSEDES,
    "superseded_by__memory_id",
    "derived_from",
    "status_reason",
)
_VALUE = ROW_COLUMNS.index("value")
_STATUS_REASON = ROW_COLUMNS.index("status_reason")
_CANONICAL_REF = ROW_COLUMNS.index("source_canonical_ref")
_VALUE_PURPOSE: str = MemoryRecord._meta.get_field("value").purpose
_REASON_PURPOSE: str = MemoryRecord._meta.get_field("status_reason").purpose
_REF_PURPOSE: str = MemoryRecord._meta.get_field("source_canonical_ref").purpose


class IsoText(Func):
    """A timestamp column as the text `datetime.isoformat()` gives for it in UTC, written by the database:
    `2026-01-02T03:04:05.123456+00:00`, without the fraction when its microseconds are 0 (as Python prints it).
    A page of rows then formats no datetime in Python (about 1 microsecond each, five per record)."""

    output_field = TextField()
    arity = 1

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        template = (
            "replace(to_char(%(expressions)s AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'), '.000000+', '+')"
        )
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        # Django stores an aware datetime as its UTC value's str(): `2026-01-02 03:04:05[.123456]`.
        template = "(replace(%(expressions)s, ' ', 'T') || '+00:00')"
        return self.as_sql(compiler, connection, template=template, **extra)


# The timestamps of the record format, read as `IsoText` columns by `row_columns` (named `iso_<field>`).
_TIMESTAMPS = (
    "valid_from",
    "valid_to",
    "recorded_from",
    "recorded_to",
    "last_verified_at",
    "recheck_after",
    "retain_until",
)


def row_columns(records: QuerySet[MemoryRecord]) -> QuerySet[MemoryRecord]:
    """`records` with the annotations `ROW_COLUMNS` reads: the supersession links, the timestamps as text."""
    return supersedes_column(records).annotate(**{f"iso_{name}": IsoText(name) for name in _TIMESTAMPS})


def supersedes_column(records: QuerySet[MemoryRecord]) -> QuerySet[MemoryRecord]:
    """`records` with the `memory_id`s of the records each supersedes, oldest first, as the column
    `payload_supersedes` (one JSON array; `ROW_COLUMNS` reads it)."""
    older = MemoryRecord.objects.filter(superseded_by=OuterRef("pk")).order_by("id")
    return records.annotate(**{_SUPERSEDES: MemoryIds(older)})


# How the API renders JSON (DRF's JSONRenderer with COMPACT_JSON, UNICODE_JSON and STRICT_JSON on).
_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_string = encode_basestring  # a str as JSON text, as `_dumps` writes it
# Stored JSON texts printed exactly as `_dumps` would print their value: a string without escapes, an integer
# (without the forms the decoder would change: -0, leading zeros), an empty array or object, true/false/null, and
# an array of such strings (the database's separator ", " made ","). Anything else is decoded and dumped again.
_PLAIN = r'"[^"\\\x00-\x1f\u2028\u2029]*"'
_AS_PRINTED = re.compile(rf"(?:{_PLAIN}|0|-?[1-9][0-9]{{0,15}}|true|false|null|\[\]|\{{\}})\Z")
_PLAIN_ARRAY = re.compile(rf"\[{_PLAIN}(?:, ?{_PLAIN})*\]\Z")
_SEALED_JSON = '{"' + sealing.JSON_MARK + '"'


def json_text(stored: str | None) -> str:
    """A stored JSON column's text (not sealed) as the API prints its value."""
    if stored is None:
        return "null"
    if _AS_PRINTED.match(stored):
        return stored
    if _PLAIN_ARRAY.match(stored):
        return stored.replace('", "', '","')
    return _dumps(json.loads(stored))


def _value_text(stored: str | None) -> str:
    if stored is not None and stored.startswith(_SEALED_JSON):
        return _dumps(sealing.open_json(json.loads(stored), _VALUE_PURPOSE))
    return json_text(stored)


def json_text_or_null(text: str | None) -> str:
    return "null" if text is None else _string(text)


def warm_keys(rows: Sequence[Sequence[Any]]) -> None:
    """Fetch the data keys of a page's sealed values, refs and reasons in one look-up (lib.keystore), rather than one
    per record as each opens."""
    key_ids = set()
    for row in rows:
        value = row[_VALUE]
        if value is not None and value.startswith(_SEALED_JSON):
            key_ids.add(sealing.envelope_key_id(json.loads(value)[sealing.JSON_MARK]))
        for text in (row[_STATUS_REASON], row[_CANONICAL_REF]):
            if text and text.startswith(sealing.TEXT_MARK):
                key_ids.add(sealing.envelope_key_id(text[len(sealing.TEXT_MARK) :]))
    if key_ids:
        keystore.warm_opening_keys(key_ids)


def row_json(row: Sequence[Any]) -> str:
    """One row of `ROW_COLUMNS` as the JSON text of `record_payload` (DRF's compact rendering)."""
    (
        _id,
        memory_id,
        project_key,
        subject_id,
        predicate,
        value,
        status,
        valid_from,
        valid_to,
        recorded_from,
        recorded_to,
        last_verified_at,
        recheck_after,
        retain_until,
        revision,
        canonical_ref,
        source_revision,
        issuer_name,
        issuer_username,
        event_ids,
        supersedes,
        superseded_by,
        derived_from,
        status_reason,
    ) = row
    # The common cases inline (a row is some 20 values, a page 50 rows): plain values, empty lists, no reason.
    if status_reason and status_reason[0] == sealing.TEXT_MARK:
        status_reason = sealing.open_text(status_reason, _REASON_PURPOSE)
    if canonical_ref and canonical_ref[0] == sealing.TEXT_MARK:
        canonical_ref = sealing.open_text(canonical_ref, _REF_PURPOSE)
    if value is None or not _AS_PRINTED.match(value):
        value = _value_text(value)
    # The timestamps are already the text isoformat() gives (`IsoText`): no escape needed.
    valid_to = "null" if valid_to is None else f'"{valid_to}"'
    recorded_to = "null" if recorded_to is None else f'"{recorded_to}"'
    last_verified_at = "null" if last_verified_at is None else f'"{last_verified_at}"'
    recheck_after = "null" if recheck_after is None else f'"{recheck_after}"'
    retain_until = "null" if retain_until is None else f'"{retain_until}"'
    superseded_by = "null" if superseded_by is None else _string(superseded_by)
    return (
        f'{{"memory_id":{_string(memory_id)},"project_id":{_string(project_key)},"subject_id":{_string(subject_id)},'
        f'"predicate":{_string(predicate)},"value":{value},"status":{_string(status)},'
        f'"valid_from":"{valid_from}","valid_to":{valid_to},"recorded_from":"{recorded_from}",'
        f'"recorded_to":{recorded_to},"last_verified_at":{last_verified_at},'
        f'"recheck_after":{recheck_after},"retain_until":{retain_until},"revision":{int(revision)},'
        f'"source":{{"canonical_ref":{_string(canonical_ref)},"revision":{_string(source_revision)},'
        f'"issuer_principal_id":{_string(issuer_name or issuer_username)},'
        f'"event_ids":{event_ids if event_ids == "[]" else json_text(event_ids)}}},'
        f'"supersedes":{supersedes if supersedes == "[]" else json_text(supersedes)},"superseded_by":{superseded_by},'
        f'"derived_from":{derived_from if derived_from == "[]" else json_text(derived_from)},'
        f'"status_reason":{_string(status_reason)}}}'
    )


def row_payload(row: Sequence[Any]) -> dict[str, Any]:
    """`record_payload` of a row (for a renderer other than the JSON one: the browsable API)."""
    payload: dict[str, Any] = json.loads(row_json(row))
    return payload
