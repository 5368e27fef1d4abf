"""Input rules every door shares: identifiers, datetimes and durations.

The domain functions call these checks (commands and tasks reach the domain without a serializer), and
the API serializers and dashboard forms use the same functions, so a rule is written once.

- Identifiers (`project_id`, `subject_id`, `predicate`, and the subject and predicate a deletion or a
  field policy names) follow one rule, `identifier_problems`: Unicode letters, marks and digits (the
  categories L, M and N: `佐藤 花子`, `株式会社あおば出版`, `提出期限`, `task-proposal-017`), plus
  `_ . : @ + -` and single inner spaces; a letter, digit or `_` first (so never a lone combining mark, a
  `-` taken for an option or a `.` of a path); no control, format (zero-width, BOM), bidirectional or
  other invisible characters, no slash, quote or other punctuation; length counted in code points; and in
  NFKC form. Doors normalise to NFKC when they parse (`normalize_identifier`), so a fullwidth
  `project` (U+FF50...) and `project` are one key and the answer shows the normalised form; the domain refuses a value that is not
  in NFKC form, so a caller that skipped the door's parse cannot store a second spelling of a key.
  Identifiers never reach a path, cache key or SQL text: cache keys hash them, file names use generated
  ids, queries bind them as parameters.
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

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_duration
from django.utils.deconstruct import deconstructible

from memory_admin.memory.errors import InvalidInput

# --- Identifiers ------------------------------------------------------------------------------

IDENTIFIER_MAX_LENGTH = {"project_id": 100, "subject_id": 200, "predicate": 200}
IDENTIFIER_PUNCTUATION = "_.:@+-"
IDENTIFIER_HELP = (
    "Unicode letters, marks and digits, _ . : @ + - and single spaces between them (a letter, digit or _ "
    "first; no control, zero-width, bidirectional or other invisible characters); at most {max_length} "
    "characters (code points), NFKC-normalised on input (fullwidth letters and digits become ASCII ones). Compared exactly "
    "(case-sensitive)."
)
IDENTIFIER_CHARSET_MESSAGE = (
    "Use letters, marks, digits, _ . : @ + - and single spaces between them, starting with a letter, digit or _."
)

# The pattern the OpenAPI schema publishes. JSON Schema's regular expressions have no portable Unicode
# classes, so it is a strict subset of the rule, written with explicit ranges: ASCII letters and digits,
# Latin-1 letters, Hiragana, Katakana (with ー and 々) and the CJK unified ideographs, each of which is its
# own NFKC form; a client that generates or checks ids from the schema never produces one the API refuses
# (tests/memory/test_identifier_rule.py checks every character of it). The API accepts more (any script).
_SCHEMA_START = (
    "A-Za-z0-9_"
    "\\u00C0-\\u00D6\\u00D8-\\u00F6\\u00F8-\\u00FF"  # Latin-1 letters (not U+00D7 or U+00F7)
    "\\u3005\\u3041-\\u3096\\u30A1-\\u30FA\\u30FC"  # 々, Hiragana, Katakana, ー
    "\\u4E00-\\u9FFF"  # CJK unified ideographs
)
_SCHEMA_NEXT = _SCHEMA_START + ".:@+\\-"
IDENTIFIER_PATTERN = f"^[{_SCHEMA_START}][{_SCHEMA_NEXT}]*(?: [{_SCHEMA_NEXT}]+)*$"

# An identifier in ASCII only, as most are: the whole rule in one regular expression (ASCII is its own NFKC
# form), so the common case skips the per-character walk.
_ASCII_IDENTIFIER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]*(?: [A-Za-z0-9_.:@+-]+)*")

# Bidirectional controls (Trojan Source, CVE-2021-42574): embeddings, overrides, isolates and marks.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Default-ignorable code points that Unicode files under letters or marks (Hangul fillers, the combining
# grapheme joiner, Mongolian and other variation selectors): invisible, so they would let two ids that
# look the same differ. The default-ignorable format characters (U+200B, U+FEFF, ...) are category Cf.
_INVISIBLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0100, 0xE01EF),
)


def normalize_identifier(value: Any) -> Any:
    """The NFKC form of an identifier as a door parses it (fullwidth `project` → `project`, U+3000 → a space);
    anything but a string is returned as it is, for the check to refuse."""
    return unicodedata.normalize("NFKC", value) if isinstance(value, str) else value


def _spelled(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X} {name}".rstrip() if name else f"U+{ord(ch):04X}"


def _invisible(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _INVISIBLE_RANGES)


def _character_problem(ch: str, position: int, previous: str) -> str | None:
    """Why the character at 1-based `position` (after `previous`, "" at the start) may not be there."""
    category = unicodedata.category(ch)
    where = f"{_spelled(ch)} at position {position}"
    if category == "Cc":
        return f"Control characters are not allowed ({where})."
    if ch in _BIDI_CONTROLS:
        return f"Bidirectional control characters are not allowed ({where})."
    if category == "Cf" or _invisible(ch):
        return f"Invisible formatting characters are not allowed ({where})."
    if category in ("Cs", "Co", "Cn"):
        return f"Surrogate, private-use and unassigned code points are not allowed ({where})."
    if ch == " ":
        if not previous:
            return "No leading space."
        if previous == " ":
            return f"No two spaces in a row (position {position})."
        return None
    if category[0] == "M":
        if not previous or previous == " ":
            return f"A combining mark cannot start the identifier or follow a space ({where})."
        return None
    if category[0] in "LN" or ch == "_":
        return None
    if ch in IDENTIFIER_PUNCTUATION:
        return None if previous else f"Start with a letter, a digit or _, not {ch!r}."
    if category[0] == "Z":
        return f"Only the ordinary space separates words ({where})."
    return f"{_spelled(ch)} ({ch!r}) at position {position} is not allowed. {IDENTIFIER_CHARSET_MESSAGE}"


def identifier_problems(value: Any, max_length: int) -> list[str]:
    """Why `value` is not a valid identifier, as sentences (empty when it is valid). `value` is expected in
    NFKC form, as doors hand it on after `normalize_identifier`."""
    if not isinstance(value, str) or not value.strip():
        return ["This field is required and may not be blank."]
    if len(value) > max_length:
        return [f"At most {max_length} characters (code points); this has {len(value)}."]
    return identifier_charset_problems(value)


def identifier_charset_problems(value: str) -> list[str]:
    """`identifier_problems` without the required and length checks (a form field does those itself)."""
    if _ASCII_IDENTIFIER.fullmatch(value):
        return []
    previous = ""
    for position, ch in enumerate(value, start=1):
        if problem := _character_problem(ch, position, previous):
            return [problem]
        previous = ch
    if previous == " ":
        return ["No trailing space."]
    normalized = unicodedata.normalize("NFKC", value)
    if normalized != value:
        return [f"Give the identifier in its NFKC form, {normalized!r} (the form it is stored and compared in)."]
    return []


def is_identifier(value: Any, max_length: int) -> bool:
    """Whether `value` is a valid identifier already in NFKC form (what `identifier_problems` accepts)."""
    if type(value) is not str or not value or len(value) > max_length:
        return False
    return bool(_ASCII_IDENTIFIER.fullmatch(value)) or not identifier_charset_problems(value)


@deconstructible
class IdentifierValidator:
    """The identifier rule as a Django validator, for serializers and forms (which normalise to NFKC first
    and check the length with their own `max_length`)."""

    code = "invalid_identifier"

    def __call__(self, value: Any) -> None:
        if problems := identifier_charset_problems(str(value)):
            raise ValidationError(problems, code=self.code)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdentifierValidator)

    def __hash__(self) -> int:
        return hash(IdentifierValidator)


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
