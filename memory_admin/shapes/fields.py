"""Field types of the record shape: datetimes with an offset, identifiers, ISO 8601 durations."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from django.utils import timezone
from django.utils.duration import duration_iso_string
from rest_framework import serializers

from memory_admin.memory import validation


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 datetime that must carry its offset (a naive one is refused, never guessed) and lie in
    the range every door accepts (memory.validation): out of it, a stored row could not be read back."""

    default_error_messages = {"naive": validation.AWARE_MESSAGE, "out_of_range": validation.RANGE_MESSAGE}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "help_text", "ISO 8601 with an offset or Z, from 1000-01-01T00:00:00Z up to 9000-01-01T00:00:00Z."
        )
        super().__init__(**kwargs)

    def to_internal_value(self, value: Any) -> datetime:
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                self.fail("invalid", format="ISO 8601 with an offset")
        elif isinstance(value, datetime):
            parsed = value
        else:
            return super().to_internal_value(value)  # refuses dates and other types with DRF's message
        if timezone.is_naive(parsed):
            self.fail("naive")
        if validation.datetime_problems(parsed):
            self.fail("out_of_range")
        return parsed


class IdentifierField(serializers.CharField):
    """A `project_id`, `subject_id` or `predicate`: normalised to NFKC as it is parsed (so a fullwidth
    `project` is `project`), then held to the domain's rule and length (memory.validation). Surrounding
    spaces are refused, not trimmed: the id a client sent is the id it gets back, NFKC aside. The OpenAPI
    schema publishes `schema_pattern` (memory_admin.lib.schema)."""

    schema_pattern = validation.IDENTIFIER_PATTERN

    def __init__(self, kind: str, **kwargs: Any) -> None:
        max_length = validation.IDENTIFIER_MAX_LENGTH[kind]
        kwargs.setdefault("max_length", max_length)
        kwargs.setdefault("help_text", validation.IDENTIFIER_HELP.format(max_length=max_length))
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators.append(validation.IdentifierValidator())

    def to_internal_value(self, data: Any) -> str:
        return cast(str, validation.normalize_identifier(super().to_internal_value(data)))


class ISODurationField(serializers.Field):
    default_error_messages = {"invalid": "Give an ISO 8601 duration such as P1D or PT6H."}

    def to_internal_value(self, data: Any) -> timedelta:
        parsed = validation.parse_iso_duration(data)
        if parsed is None or parsed <= timedelta(0):
            self.fail("invalid")
        if problems := validation.duration_problems(parsed):
            raise serializers.ValidationError(problems)
        return parsed

    def to_representation(self, value: timedelta) -> str:
        return duration_iso_string(value)


class IsoDateTimeField(serializers.DateTimeField):
    """A datetime rendered as Python's `isoformat()` (offset kept, never rewritten to Z), as every
    payload of this API shows one."""

    def to_representation(self, value: Any) -> str:
        return value.isoformat()  # DRF renders None itself, without calling this


# --- Output fields: what an answer's declared fields read, so the serializer both renders and documents it ---


class PrincipalNameField(serializers.CharField):
    """A principal (the field's source) as answers name it: its name, else its username; null for none."""

    def to_representation(self, value: Any) -> str:
        return str(value.name or value.username)


class IsSetField(serializers.BooleanField):
    """True when the source attribute holds a value (a moment something happened), False when it is null."""

    def get_attribute(self, instance: Any) -> bool:
        return bool(super().get_attribute(instance))


class OmitWhenAbsentMixin:
    """Leaves the key out of the answer when the instance has no such attribute (a part some answers add)."""

    def get_attribute(self, instance: Any) -> Any:
        if not hasattr(instance, self.source_attrs[0]):  # type: ignore[attr-defined]
            raise serializers.SkipField()
        return super().get_attribute(instance)  # type: ignore[misc]


def declared_representation(serializer: serializers.Serializer, instance: Any) -> Any:
    """`instance` rendered by the serializer's declared fields alone, past a hand-built `to_representation`
    (docs/hand-built-rows.md): what tests compare a hand-built row with, and what bench/serializers.py times."""
    return serializers.Serializer.to_representation(serializer, instance)
