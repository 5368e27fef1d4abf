"""Input rules every door shares: identifiers, datetimes and durations.

The domain functions call these checks (commands and tasks reach the domain without a serializer), and
the API serializers and dashboard forms use the same functions, so a rule is written once.

- Identifiers (`project_id`, `subject_id`, `predicate`) are ASCII: a letter, digit or `_` first, then
  letters, digits and `_ . : @ + -`; no spaces, slashes or control characters. That covers slugs,
  UUIDs, e-mail addresses and `namespace:key` ids, and nothing that could climb out of a path, be
  taken for an option, or differ from another id only invisibly (Unicode look-alikes).
- Datetimes carry an offset and lie between EARLIEST and LATEST once taken to UTC. The bounds leave
  room for the arithmetic done on them (a recheck interval, a retention period or an expiry added to
  a date) without leaving the range Python and the database can both hold: year 0 or 10000 in UTC
  is stored by PostgreSQL but cannot be read back into Python, which broke every read of the row.
- Durations (recheck intervals, retention periods) are at most MAX_DURATION for the same reason.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

from django.core.validators import RegexValidator
from django.utils import timezone
from django.utils.dateparse import parse_duration

from memory_admin.memory.errors import InvalidInput

# --- Identifiers ------------------------------------------------------------------------------

# Anchored with \A and \Z (in Python `$` also matches before a final newline); the OpenAPI schema
# publishes it as ^...$ (drf-spectacular rewrites the anchors for ECMA-262).
IDENTIFIER_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.:@+-]*\Z")
IDENTIFIER_PATTERN = "^[A-Za-z0-9_][A-Za-z0-9_.:@+-]*$"
IDENTIFIER_CHARSET_MESSAGE = (
    "Use only ASCII letters, digits and _ . : @ + - (starting with a letter, digit or _); "
    "no spaces, slashes or other characters."
)
IDENTIFIER_MAX_LENGTH = {"project_id": 100, "subject_id": 200, "predicate": 200}
IDENTIFIER_HELP = (
    "ASCII letters, digits and _ . : @ + - (a letter, digit or _ first); no spaces, slashes or other "
    "characters; at most {max_length} characters. Compared exactly (case-sensitive)."
)


def identifier_problems(value: Any, max_length: int) -> list[str]:
    """Why `value` is not a valid identifier, as sentences (empty when it is valid)."""
    if not isinstance(value, str) or not value.strip():
        return ["This field is required and may not be blank."]
    if len(value) > max_length:
        return [f"At most {max_length} characters."]
    if not IDENTIFIER_RE.match(value):
        return [IDENTIFIER_CHARSET_MESSAGE]
    return []


class IdentifierValidator(RegexValidator):
    """The identifier character set as a Django validator, for serializers and forms (the OpenAPI
    schema reads its pattern)."""

    regex = IDENTIFIER_RE
    message = IDENTIFIER_CHARSET_MESSAGE
    code = "invalid_identifier"


def check_identifiers(**named: Any) -> None:
    """Raise InvalidInput naming every field of `named` (project_id=..., subject_id=...) that is not a valid
    identifier. A list value (e.g. an event's subject_ids) is checked item by item."""
    errors: dict[str, list[str]] = {}
    for name, value in named.items():
        kind = "subject_id" if name == "subject_ids" else name
        max_length = IDENTIFIER_MAX_LENGTH[kind]
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if problems := identifier_problems(item, max_length):
                errors.setdefault(name, []).extend(problems)
                break
    if errors:
        raise InvalidInput(errors)


def text_problems(value: Any) -> list[str]:
    """Free text (a canonical ref, a source revision) is kept as given, but without control characters."""
    if isinstance(value, str) and any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        return ["Control characters are not allowed."]
    return []


# --- Datetimes and durations ------------------------------------------------------------------

EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
# About a century: the longest recheck interval or retention period a policy may set.
MAX_DURATION = timedelta(days=36_600)
MAX_RETENTION_DAYS = MAX_DURATION.days

AWARE_MESSAGE = "Give a timezone-aware ISO 8601 datetime (with an offset or Z)."
RANGE_MESSAGE = "Give a datetime from 1000-01-01T00:00:00Z up to (not including) 9000-01-01T00:00:00Z."
DATE_RANGE_MESSAGE = "Give a date from 1000-01-01 up to (not including) 9000-01-01."
DURATION_MESSAGE = f"At most {MAX_DURATION.days} days."
MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)
OFFSET_MESSAGE = "Give a UTC offset from -15:59 to +15:59 (real time zones lie within -12:00 and +14:00)."


def datetime_problems(value: Any) -> list[str]:
    """Why `value` is not an acceptable datetime input (empty when it is)."""
    if not isinstance(value, datetime) or timezone.is_naive(value):
        return [AWARE_MESSAGE]
    # Aware datetimes compare by their UTC instant without converting (converting year 1 at +05:00
    # to UTC would itself overflow).
    if not EARLIEST <= value < LATEST:
        return [RANGE_MESSAGE]
    if abs(cast(timedelta, value.utcoffset())) > MAX_UTC_OFFSET:
        return [OFFSET_MESSAGE]  # Python takes offsets up to ±23:59; PostgreSQL refuses past ±15:59
    return []


def date_problems(value: Any) -> list[str]:
    if not isinstance(value, date) or not EARLIEST.date() <= value < LATEST.date():
        return [DATE_RANGE_MESSAGE]
    return []


def check_datetimes(**named: datetime | date | None) -> None:
    """Raise InvalidInput naming every given datetime (or date) out of range or without an offset; None
    means "not given" and passes."""
    errors: dict[str, list[str]] = {}
    for name, value in named.items():
        if value is None:
            continue
        if isinstance(value, date) and not isinstance(value, datetime):
            problems = date_problems(value)
        else:
            problems = datetime_problems(value)
        if problems:
            errors[name] = problems
    if errors:
        raise InvalidInput(errors)


def parse_iso_duration(text: Any) -> timedelta | None:
    """An ISO 8601 duration such as P1D or PT6H, or None when `text` is not one (an absurdly large one
    included: Django's parser raises OverflowError on those)."""
    if not isinstance(text, str) or not text.startswith(("P", "-P")):
        return None
    try:
        return parse_duration(text)
    except (OverflowError, ValueError):
        return None


def duration_problems(value: Any) -> list[str]:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        return ["Give a positive ISO 8601 duration such as P1D or PT6H."]
    if value > MAX_DURATION:
        return [DURATION_MESSAGE]
    return []


def retention_days_problems(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return ["Give a whole number of days, at least 1."]
    if value > MAX_RETENTION_DAYS:
        return [f"At most {MAX_RETENTION_DAYS} days."]
    return []
