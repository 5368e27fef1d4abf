"""The record-list filter: one object that both the API's record list (`GET /api/v1/records/`) and the
dashboard's records page parse their query parameters into, and that turns into a queryset filter.

Parameters, by the API's names (the page also takes its own short names for the first three):

    project_id (page: project), subject_id (page: subject), predicate, status, valid_at, known_at
    freshness, source, q                                    (the page only; the API ignores them)

A blank parameter is no filter. Each door parses with its own leniency (`Door`): the API takes identifiers as
sent (NFKC aside) and datetimes with an offset, and answers any problem as 400 `invalid` naming the parameter
with the API's long-standing messages; the page trims what a person typed, reads a datetime without an offset
in the tenant's time zone and shows the problem beside the form. The rules themselves are memory.validation's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum
from typing import Any, cast

from django.core.exceptions import ValidationError
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memory_admin.lib import rows, sealing
from memory_admin.memory import validation
from memory_admin.memory.errors import InvalidInput
from memory_admin.memory.models import MemoryRecord, RecordQuerySet
from memory_admin.memory.reads import FRESHNESS, Freshness, freshness_filter


class Door(Enum):
    API = "api"
    PAGE = "page"


# Parameter name -> the filter's attribute. The API reads the first six; the page reads every name.
API_PARAMETERS = {
    "project_id": "project",
    "subject_id": "subject",
    "predicate": "predicate",
    "status": "status",
    "valid_at": "valid_at",
    "known_at": "known_at",
}
PAGE_PARAMETERS = {
    **API_PARAMETERS,
    "project": "project",
    "subject": "subject",
    "freshness": "freshness",
    "source": "source",
    "q": "q",
}
IDENTIFIER_KINDS = {"project": "project_id", "subject": "subject_id", "predicate": "predicate"}
TEXT_MAX_LENGTH = {"source": 500, "q": 200}

# The messages the API has always answered with (its parameters were parsed by DRF fields).
BLANK_MESSAGE = "This field may not be blank."
LENGTH_MESSAGE = "Ensure this field has no more than {max_length} characters."
CHOICE_MESSAGE = '"{value}" is not a valid choice.'
API_DATETIME_MESSAGE = "Datetime has wrong format. Use one of these formats instead: ISO 8601 with an offset."
PAGE_DATETIME_MESSAGE = "Enter a date and time such as 2026-10-21 12:00 (or ISO 8601 with an offset)."
TWO_NAMES_MESSAGE = "Give {short} or {long}, not both with different values."


@dataclass(frozen=True)
class RecordFilter:
    """Which records a list shows. None is "any"; `status` None is every status."""

    project: str | None = None
    subject: str | None = None
    predicate: str | None = None
    status: str | None = None
    valid_at: datetime | None = None
    known_at: datetime | None = None
    freshness: Freshness | None = None
    source: str | None = None
    q: str | None = None

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], door: Door, *, statuses: tuple[str, ...] | None = None
    ) -> RecordFilter:
        """Parse the door's parameters (the last value of a repeated one); InvalidInput names every parameter
        that is wrong, by the name it was sent under. `statuses`: the status values this door lists (default:
        every record status)."""
        names = API_PARAMETERS if door is Door.API else PAGE_PARAMETERS
        allowed = statuses if statuses is not None else tuple(MemoryRecord.Status.values)
        values: dict[str, Any] = {}
        sent_as: dict[str, str] = {}
        errors: dict[str, list[str]] = {}
        for name, attribute in names.items():
            raw = params.get(name)
            if raw is None:
                continue
            text = str(raw).strip() if door is Door.PAGE else str(raw)
            if text == "":
                continue  # blank: no filter
            try:
                value = _parse(attribute, name, text, door, allowed)
            except ValidationError as exc:
                errors[name] = list(exc.messages)
                continue
            if attribute in values and values[attribute] != value:
                long, short = sorted((name, sent_as[attribute]), key=len, reverse=True)
                errors[long] = [TWO_NAMES_MESSAGE.format(short=short, long=long)]
                continue
            values[attribute] = value
            sent_as[attribute] = name
        if errors:
            raise InvalidInput(errors)
        return cls(**values)

    @property
    def narrowed(self) -> bool:
        """Whether anything but the status narrows the list (the maintained counts answer only the status)."""
        return any(getattr(self, f.name) is not None for f in fields(self) if f.name != "status")

    def apply(self, records: RecordQuerySet, tenant_id: int, now: datetime | None = None) -> RecordQuerySet:
        """`records` (already the tenant's) narrowed to what the filter asks."""
        now = now or timezone.now()
        if self.status is not None:
            records = records.filter(status=self.status)
        if self.project is not None:
            records = records.in_project(tenant_id, self.project)
        if self.subject is not None:
            records = records.filter(subject_id=self.subject)
        if self.predicate is not None:
            records = records.filter(predicate=self.predicate)
        if self.valid_at is not None or self.known_at is not None:
            records = records.as_of(self.valid_at or now, self.known_at or now)
        if self.freshness is not None:
            # The same rule the API's reads answer with (reads.freshness_of), as a query.
            records = records.filter(freshness_filter(self.freshness, now))
        if self.source is not None:
            records = records.filter(source_condition(records, self.source))
        if self.q is not None:
            q = self.q
            # A sealed value (lib.sealing) is ciphertext in the database: values stored in clear are matched there
            # (a term must not match an envelope's text), sealed ones among the newest SEALED_VALUE_SCAN records the
            # other filters leave, opened and matched here (`_sealed_matches`).
            records = records.annotate(value_text=Cast("value", TextField()))
            sealed = Q(value_text__contains=f'"{sealing.JSON_MARK}"')
            records = records.filter(
                Q(subject_id__icontains=q)
                | Q(predicate__icontains=q)
                | (Q(value_text__icontains=q) & ~sealed)
                | Q(pk__in=rows.among(_sealed_matches(records.filter(sealed), q)))
            )
        return records


# How many of the newest sealed records a text search (`q`) opens to match their values.
SEALED_VALUE_SCAN = 5_000


def _sealed_matches(records: RecordQuerySet, q: str) -> list[int]:
    """Ids of the newest SEALED_VALUE_SCAN of `records` (sealed values) whose value contains `q`, any case."""
    term = q.lower()
    found = []
    for pk, value in records.order_by("-id").values_list("id", "value")[:SEALED_VALUE_SCAN]:
        if term in json.dumps(value, ensure_ascii=False, default=str).lower():
            found.append(pk)
    return found


# How many of the newest records with a sealed source ref a source filter opens to match the ref past its system.
SEALED_SOURCE_SCAN = 5_000


def source_condition(records: RecordQuerySet, prefix: str) -> Q:
    """Records whose source ref starts with `prefix`. A ref is sealed (lib.sealing) but its system ("crm" of
    "crm:contacts/alice") is kept in clear in `source_system`, so the filter is decided in SQL where the system
    decides it: refs stored in clear by their text, sealed refs by their system when `prefix` is a system name's
    beginning ("cr", "crm") or a whole system and its colon ("crm:"). A longer prefix ("crm:contacts/al"), and sealed
    refs without a system name ("CRM:x", "https://..."), are matched after opening, among the newest
    SEALED_SOURCE_SCAN of the candidates the other filters and the system leave (`_sealed_source_matches`)."""
    sealed = Q(source_canonical_ref__startswith=sealing.TEXT_MARK)
    condition = Q(source_canonical_ref__startswith=prefix) & ~sealed
    system, colon, rest = prefix.partition(":")
    to_open = Q(source_system="")
    if not colon:
        if sealing.SYSTEM_NAME.fullmatch(prefix):
            condition |= sealed & Q(source_system__startswith=prefix)  # every ref of these systems starts so
    elif sealing.SYSTEM_NAME.fullmatch(system):
        if rest:
            to_open |= Q(source_system=system)
        else:
            condition |= sealed & Q(source_system=system)
    candidates = records.filter(sealed & to_open)
    return condition | Q(pk__in=rows.among(_sealed_source_matches(candidates, prefix)))


def _sealed_source_matches(records: RecordQuerySet, prefix: str) -> list[int]:
    """Ids of the newest SEALED_SOURCE_SCAN of `records` (sealed refs) whose opened ref starts with `prefix`."""
    found = []
    for pk, ref in records.order_by("-id").values_list("id", "source_canonical_ref")[:SEALED_SOURCE_SCAN]:
        if ref.startswith(prefix):
            found.append(pk)
    return found


def _parse(attribute: str, name: str, text: str, door: Door, statuses: tuple[str, ...]) -> Any:
    if attribute in IDENTIFIER_KINDS:
        return _identifier(text, validation.IDENTIFIER_MAX_LENGTH[IDENTIFIER_KINDS[attribute]])
    if attribute == "status":
        return _choice(text, statuses)
    if attribute == "freshness":
        return cast(Freshness, _choice(text, FRESHNESS))
    if attribute in ("valid_at", "known_at"):
        return _datetime(text, door)
    if len(text) > TEXT_MAX_LENGTH[attribute]:
        raise ValidationError(LENGTH_MESSAGE.format(max_length=TEXT_MAX_LENGTH[attribute]))
    return text


def _identifier(text: str, max_length: int) -> str:
    """NFKC first, then every problem at once: the length and the identifier rule."""
    value = cast(str, validation.normalize_identifier(text))
    problems = []
    if len(value) > max_length:
        problems.append(LENGTH_MESSAGE.format(max_length=max_length))
    try:
        validation.IdentifierValidator()(value)
    except ValidationError as exc:
        problems.extend(exc.messages)
    if problems:
        raise ValidationError(problems)
    return value


def _choice(text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise ValidationError(CHOICE_MESSAGE.format(value=text))
    return text


def _datetime(text: str, door: Door) -> datetime:
    """The API: ISO 8601 with an offset. The page also takes a bare date (its start) and a local time (in the
    current time zone, the tenant's)."""
    text = text.strip()
    if door is Door.PAGE and len(text) == 10:
        text += "T00:00"
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(API_DATETIME_MESSAGE if door is Door.API else PAGE_DATETIME_MESSAGE) from None
    if timezone.is_naive(parsed):
        if door is Door.API:
            raise ValidationError(validation.AWARE_MESSAGE)
        parsed = timezone.make_aware(parsed, timezone.get_current_timezone())
    if validation.datetime_problems(parsed):
        raise ValidationError(validation.RANGE_MESSAGE)
    return parsed
