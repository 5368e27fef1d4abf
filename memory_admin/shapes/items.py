"""Items in the body shape of `POST /records/` parsed one by one: each an Assertion, or the 400 that item gets.

The batch endpoint (`POST /records/batch/`), `manage.py import` and `POST /records/` itself (`assertion_of`) turn
bodies into assertions here, so every door reads the record shape the same way (both forms of the source, the
default `valid_from`, the same messages).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from django.utils import timezone
from rest_framework import serializers

from memory_admin.memory import validation
from memory_admin.memory.actions import Assertion
from memory_admin.memory.errors import DomainError, InvalidInput
from memory_admin.shapes.records import REVISION_MAX, AssertFactSerializer


class ItemParser:
    """Parses items in the body shape of `POST /records/` into assertions, each item on its own: an Assertion, or
    the 400 that item gets (fields named).

    One serializer validates every item (as DRF's ListSerializer does with its child): making a serializer
    deep-copies its declared fields, which for a thousand items cost several times the validation itself.
    """

    def __init__(self) -> None:
        self._body = AssertFactSerializer()
        # The source's length limits, as its serializer declares them (the shortcut checks the same).
        source = cast(serializers.Serializer, self._body.fields["source"])
        self._text_limits = tuple(
            cast(int, cast(serializers.CharField, source.fields[name]).max_length)
            for name in ("canonical_ref", "revision")
        )

    def __call__(self, raw: Any) -> Assertion | DomainError:
        if not isinstance(raw, dict):
            return InvalidInput({"non_field_errors": ["Each item is an object in the shape of POST /records/."]})
        plain = _plain_assertion(raw, self._text_limits)
        if plain is not None:
            return plain
        try:
            data = self._body.run_validation(raw)
        except serializers.ValidationError as exc:
            problems = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
            return InvalidInput({str(name): [str(e) for e in _flat(errors)] for name, errors in problems.items()})
        return assertion_of(data)


def _plain_assertion(raw: dict[str, Any], text_limits: tuple[int, ...]) -> Assertion | None:
    """The assertion of an item every field of which the serializer would take exactly as given (the common
    case of an import), or None: then the serializer decides, with its messages. Only a shortcut: it accepts
    nothing the serializer refuses and yields what `assertion_of` would (tests/memory/test_batch_set_based_writes.py compares
    the two on awkward items). Anything unusual (event ids, derived_from, whitespace to trim, a number as text,
    a datetime object) goes to the serializer."""
    source = raw.get("source")
    if type(source) is not dict or not source.keys() <= {"canonical_ref", "revision"}:
        return None
    if "derived_from" in raw:
        return None
    ids = [raw.get(name) for name in _IDENTIFIERS]
    for value, max_length in zip(ids, _IDENTIFIER_LIMITS, strict=True):
        if not validation.is_identifier(value, max_length):
            return None  # the serializer normalises it to NFKC, or refuses it with the reason
    ref, revision = source.get("canonical_ref"), source.get("revision")
    for text, max_length in zip((ref, revision), text_limits, strict=True):
        # isprintable: no NUL, surrogate or other character DRF's CharField refuses; no whitespace to trim.
        if (
            type(text) is not str
            or not text
            or len(text) > max_length
            or not text.isprintable()
            or text != text.strip()
        ):
            return None
    value = raw.get("value")
    if value is None:
        return None
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    valid_from = _plain_datetime(raw.get("valid_from"))
    valid_to = raw.get("valid_to")
    valid_to = None if valid_to is None else _plain_datetime(valid_to)
    expected = raw.get("expected_revision")
    if valid_from is None or (raw.get("valid_to") is not None and valid_to is None):
        return None
    if expected is not None and (type(expected) is not int or not 0 <= expected <= REVISION_MAX):
        return None
    project_id, subject_id, predicate = cast(list[str], ids)
    return Assertion(
        project_id=project_id,
        subject_id=subject_id,
        predicate=predicate,
        value=value,
        valid_from=valid_from,
        valid_to=valid_to,
        source_canonical_ref=cast(str, ref),
        source_revision=cast(str, revision),
        expected_revision=expected,
        derived_from=[],
        event_ids=None,
    )


_IDENTIFIERS = ("project_id", "subject_id", "predicate")
_IDENTIFIER_LIMITS = tuple(validation.IDENTIFIER_MAX_LENGTH[name] for name in _IDENTIFIERS)


def _plain_datetime(value: Any) -> datetime | None:
    """`AwareDateTimeField`'s reading of an ISO 8601 string it accepts, or None."""
    if type(value) is not str:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if timezone.is_naive(parsed) or validation.datetime_problems(parsed):
        return None
    return parsed


def _flat(problems: Any) -> list[Any]:
    if isinstance(problems, dict):
        return [f"{key}: {e}" for key, value in problems.items() for e in _flat(value)]
    if isinstance(problems, list):
        return [e for item in problems for e in _flat(item)]
    return [problems]


def assertion_of(data: dict[str, Any]) -> Assertion:
    """An Assertion from a validated `AssertFactSerializer` body."""
    return Assertion(
        project_id=data["project_id"],
        subject_id=data["subject_id"],
        predicate=data["predicate"],
        value=data["value"],
        valid_from=data.get("valid_from") or timezone.now(),  # the API's one default: from the time of the request
        valid_to=data.get("valid_to"),
        source_canonical_ref=data["source"]["canonical_ref"],
        source_revision=data["source"]["revision"],
        expected_revision=data.get("expected_revision"),
        derived_from=[dict(d) for d in data.get("derived_from", [])],
        event_ids=data["source"].get("event_ids"),
    )
