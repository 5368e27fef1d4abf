"""Saying things in people's words: dates, relative times, durations, values and caveats.

Pure formatting, no Django templates and no database: the template filters in
`templatetags/dashboard.py` turn what these functions return into HTML, and tests/dashboard/test_wording.py checks
them one by one. A person never sees an ISO string, JSON, or a Python dict or list text; the exact ISO
time stays available on hover (the filters put it in `<time datetime>` and `title`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import Any

# --- Dates and times ----------------------------------------------------------------------------

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?$")


def parse_iso(text: str, zone: tzinfo | None = None) -> datetime | date | None:
    """The date or datetime an ISO 8601 string names, else None (any other text stays text).

    A datetime without an offset is read in `zone` (the tenant's zone) when one is given."""
    text = text.strip()
    if _ISO_DATE.match(text):
        try:
            return date.fromisoformat(text)
        except ValueError:
            return None
    if _ISO_DATETIME.match(text):
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if moment.tzinfo is None and zone is not None:
            moment = moment.replace(tzinfo=zone)
        return moment
    return None


def people_date(day: date) -> str:
    """ "Mon 2 Nov 2026"."""
    return f"{day:%a} {day.day} {day:%b %Y}"


def people_datetime(moment: datetime, zone: tzinfo | None = None) -> str:
    """ "Mon 2 Nov 2026, 17:00 JST": in `zone` (the tenant's) when given, with the zone's short name."""
    if zone is not None and moment.tzinfo is not None:
        moment = moment.astimezone(zone)
    text = f"{people_date(moment)}, {moment:%H:%M}"
    name = moment.tzname() if moment.tzinfo is not None else None
    return f"{text} {name}" if name else text


def people_moment(moment: datetime, zone: tzinfo | None = None) -> str:
    """What the as-of control shows and accepts back: "Mon 2 Nov 2026" at midnight, else "Mon 2 Nov 2026, 17:00"
    (in `zone`, the tenant's, without the zone's name: the control says which zone its times are in)."""
    if zone is not None and moment.tzinfo is not None:
        moment = moment.astimezone(zone)
    if (moment.hour, moment.minute, moment.second, moment.microsecond) == (0, 0, 0, 0):
        return people_date(moment)
    return f"{people_date(moment)}, {moment:%H:%M}"


# --- Versions -------------------------------------------------------------------------------------


def version(revision: int, latest: int | None = None) -> str:
    """The one revision numbering people read (issue 34, item 4): the product's own count of a fact's versions,
    "version 2 of 3". The source's revision is a detail beside it (`source_revision`), never a second count."""
    return f"version {revision} of {latest}" if latest else f"version {revision}"


def source_revision(revision: Any, zone: tzinfo | None = None) -> str:
    """The source's own revision as a detail: "source r18"; "source revision 17" for a bare number or a date
    (written as people read it, "source revision Mon 30 Nov 2026")."""
    text = plain(revision, zone, 40).strip() if revision not in (None, "") else ""
    if not text:
        return "no source revision"
    return f"source revision {text}" if text[0].isdigit() or text != str(revision).strip() else f"source {text}"


_UNITS = (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def _plural(n: int, unit: str) -> str:
    return f"{n:,} {unit}" if n == 1 else f"{n:,} {unit}s"


def duration(span: timedelta | int | float | None, *, parts: int = 2) -> str:
    """ "1 day", "2 days 3 hours", "45 minutes": the `parts` largest non-zero units, never "1 day, 0:00:00"."""
    if span is None:
        return "—"
    seconds = int(span.total_seconds() if isinstance(span, timedelta) else span)
    if seconds < 0:
        seconds = -seconds
    if seconds == 0:
        return "0 seconds"
    words = []
    for unit, size in _UNITS:
        n, seconds = divmod(seconds, size)
        if n:
            words.append(_plural(n, unit))
        elif words:
            break  # "1 day 4 minutes" would mislead: stop at the first gap after the largest unit
        if len(words) == parts:
            break
    return " ".join(words)


def _rough(seconds: int) -> str:
    """One unit, rounded down: "39 days", "5 hours", "12 minutes"."""
    for unit, size in _UNITS[:-1]:
        if seconds >= size:
            return _plural(seconds // size, unit)
    return "less than a minute"


def relative(moment: datetime, now: datetime) -> str:
    """ "3 days ago", "in 5 hours", "just now"."""
    seconds = int((now - moment).total_seconds())
    if abs(seconds) < 60:
        return "just now"
    return f"{_rough(seconds)} ago" if seconds > 0 else f"in {_rough(-seconds)}"


def overdue(due: datetime, now: datetime) -> str:
    """ "39 days overdue" once `due` has passed, "due in 3 days" before."""
    seconds = int((now - due).total_seconds())
    if seconds >= 0:
        return "due now" if seconds < 60 else f"{_rough(seconds)} overdue"
    return f"due in {_rough(-seconds)}"


def days_left(deadline: datetime, now: datetime) -> str:
    """ "12 days left", "due today", "3 days late" against a deadline."""
    days = (deadline - now).total_seconds() / 86400
    if 0 <= days < 1:
        return "due today"
    if days >= 1:
        return f"{_plural(int(days), 'day')} left"
    return f"{_plural(int(-days) or 1, 'day')} late"


# --- Values ---------------------------------------------------------------------------------------

# Currencies written with their sign; any other three-letter code is written after the amount.
_CURRENCY_SIGNS = {"JPY": "¥", "USD": "$", "EUR": "€", "GBP": "£", "CNY": "CN¥", "KRW": "₩", "INR": "₹"}
_AMOUNT_KEYS = ("amount", "value", "price")
_UNIT_KEYS = ("currency", "unit")


def number(n: int | float | Decimal) -> str:
    """Grouped digits: "1,200", "3,456.75"."""
    if isinstance(n, bool):
        return "yes" if n else "no"
    if isinstance(n, int):
        return f"{n:,}"
    if isinstance(n, float) and n.is_integer() and abs(n) < 1e15:
        return f"{int(n):,}"
    return f"{n:,}"


def label(key: Any) -> str:
    """A dict key as a label: "unit_price" → "Unit price"."""
    text = str(key).replace("_", " ").replace("-", " ").strip()
    return text[:1].upper() + text[1:] if text else "—"


@dataclass
class Shown:
    """A value ready to show: `kind` says how (text, date, datetime, number, money, flag, empty, pairs,
    items, rows); `text` is the one-line wording; `moment` a date or datetime; `parts` the labelled
    pairs of a mapping, `items` a list's entries, `columns`/`rows` a list of mappings as a table."""

    kind: str
    text: str = ""
    moment: datetime | date | None = None
    parts: list[tuple[str, Shown]] = field(default_factory=list)
    items: list[Shown] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[Shown]] = field(default_factory=list)


def _money(value: dict[str, Any]) -> str | None:
    """ "¥1,200" or "1,200 CHF" when a mapping is an amount with its currency or unit, else None."""
    if len(value) != 2:
        return None
    amount: Any = next((value[k] for k in _AMOUNT_KEYS if k in value), None)
    unit = next((value[k] for k in _UNIT_KEYS if k in value), None)
    if not isinstance(amount, int | float | Decimal) or isinstance(amount, bool) or not isinstance(unit, str):
        return None
    sign = _CURRENCY_SIGNS.get(unit.upper()) if "currency" in value or unit.upper() in _CURRENCY_SIGNS else None
    if sign:
        return f"{'-' if amount < 0 else ''}{sign}{number(-amount if amount < 0 else amount)}"
    return f"{number(amount)} {unit}"


def show(value: Any, zone: tzinfo | None = None) -> Shown:
    """How to show a stored value (a JSON value, or a date): by type, never as JSON or a repr."""
    if value is None or value == "" or value == [] or value == {}:
        return Shown("empty", "none")
    if isinstance(value, bool):
        return Shown("flag", "yes" if value else "no")
    if isinstance(value, int | float | Decimal):
        return Shown("number", number(value))
    if isinstance(value, datetime):
        return Shown("datetime", people_datetime(value, zone), moment=value)
    if isinstance(value, date):
        return Shown("date", people_date(value), moment=value)
    if isinstance(value, str):
        moment = parse_iso(value, zone)
        if isinstance(moment, datetime):
            return Shown("datetime", people_datetime(moment, zone), moment=moment)
        if isinstance(moment, date):
            return Shown("date", people_date(moment), moment=moment)
        return Shown("text", value)
    if isinstance(value, dict):
        money = _money(value)
        if money:
            return Shown("money", money)
        parts = [(label(k), show(v, zone)) for k, v in value.items()]
        return Shown("pairs", "; ".join(f"{k}: {v.text}" for k, v in parts), parts=parts)
    if isinstance(value, list | tuple):
        entries = list(value)
        keys = _table_columns(entries)
        if keys:
            rows = [[show(entry.get(k), zone) for k in keys] for entry in entries]
            text = f"{_plural(len(rows), 'row')}: " + "; ".join(", ".join(c.text for c in row) for row in rows)
            return Shown("rows", text, columns=[label(k) for k in keys], rows=rows)
        items = [show(v, zone) for v in entries]
        return Shown("items", ", ".join(i.text for i in items), items=items)
    return Shown("text", str(value))


def _table_columns(entries: list[Any]) -> list[str]:
    """The columns of a list of mappings (in first-seen order), or [] when it is not one."""
    if not entries or not all(isinstance(e, dict) for e in entries):
        return []
    keys: list[str] = []
    for entry in entries:
        keys.extend(k for k in entry if k not in keys)
    return keys


def plain(value: Any, zone: tzinfo | None = None, limit: int | None = None) -> str:
    """A value as one line of text (for a table cell, a title or a sentence), cut at `limit` characters."""
    text = show(value, zone).text
    if limit is not None and len(text) > limit:
        return text[: max(limit - 1, 1)].rstrip() + "…"
    return text


# --- Caveats --------------------------------------------------------------------------------------

_NOT_CONFIRMED = {
    "source_unavailable": "the canonical source could not be reached",
    "source_ambiguous": "the canonical source's answer was ambiguous",
    "not_checked": "it was not checked",
}


@dataclass
class CaveatPart:
    """One labelled part of a caveat: "Last verified value" → a value, "On" → a moment, or a reason."""

    label: str
    value: Any = None
    moment: datetime | None = None
    text: str = ""


def caveat_parts(
    *,
    freshness: str | None,
    status: str | None = None,
    last_verified_at: datetime | None = None,
    last_verified_value: Any = None,
    recheck_after: datetime | None = None,
    source: str = "",
    attempt_outcome: str | None = None,
    attempt_at: datetime | None = None,
    attempt_error: str = "",
    manual: bool = False,
    now: datetime | None = None,
) -> list[CaveatPart]:
    """The caveat of a fact's answer as labelled parts, or [] when the value is fresh and confirmed.

    The same facts the domain's caveat states (reads.FactView and the latest failed recheck), said as
    "Last verified value: … on …; could not be confirmed now: …" instead of one ISO-stamped string."""
    if status == "disputed":
        return [CaveatPart("Disputed", text="sources disagree and no rule orders them; an owner must resolve it")]
    failed = attempt_outcome in _NOT_CONFIRMED
    if freshness in (None, "fresh") and not failed:
        return []
    parts: list[CaveatPart] = []
    if last_verified_at is None:
        parts.append(
            CaveatPart("Never verified", text=f"against the canonical source{f' ({source})' if source else ''}")
        )
    else:
        parts.append(CaveatPart("Last verified value", value=last_verified_value, moment=last_verified_at))
    if failed:
        why = _NOT_CONFIRMED[attempt_outcome or ""]
        if attempt_error:
            why = f"{why} ({attempt_error.rstrip('.')})"
        parts.append(CaveatPart("Could not be confirmed", moment=attempt_at, text=why))
    elif freshness == "recheck_due":
        if manual:
            why = "awaiting manual verification"
        else:
            why = "the recheck is due and has not confirmed it since"
        parts.append(CaveatPart("Could not be confirmed now", text=why))
        if recheck_after is not None and now is not None:
            parts.append(CaveatPart("Recheck due", moment=recheck_after, text=overdue(recheck_after, now)))
    return parts


# --- Audit events -------------------------------------------------------------------------------

ACTION_WORDS = {
    "record.asserted.created": "recorded",
    "record.asserted.history": "imported as history",
    "record.asserted.disputed": "reported a conflicting value",
    "record.superseded": "superseded",
    "record.disputed": "disputed",
    "record.excluded": "excluded from context",
    "record.expired": "expired",
    "record.dispute_resolved": "dispute resolved",
    "record.dispute_reopened": "dispute reopened (resolution undone)",
    "record.rechecked.verified_unchanged": "verified, unchanged",
    "record.rechecked.verified_changed": "verified, changed at the source",
    "record.rechecked.source_unavailable": "recheck failed: source unavailable",
    "record.rechecked.source_ambiguous": "recheck failed: ambiguous answer",
    "record.rechecked.not_checked": "not checked",
    "dispute.opened": "dispute opened",
    "dispute.resolved": "dispute resolved",
    "dispute.reopened": "dispute reopened (resolution undone)",
    "policy.created": "policy created",
    "policy.updated": "policy changed",
    "policy.deleted": "policy deleted",
    "deletion.requested": "deletion requested",
    "deletion.approved": "deletion approved",
    "deletion.cancelled": "deletion cancelled",
    "deletion.reopened": "deletion reopened",
    "deletion.purge_confirmed": "deletion confirmed purged",
    "tombstone.lifted": "tombstone lifted",
    "token.issued": "API token issued",
    "token.revoked": "API token revoked",
    "login.unlocked": "sign-in unlocked",
    "task.failed": "background task failed",
}


PROPAGATION_WORDS = {
    "marked_stale": "marked stale",
    "suspended": "put on hold until the fact is settled",
    "notice_sent": "notice sent to the agent",
    "evicted": "evicted from the cache",
    "marked_unusable": "kept out of search answers",
}


def propagation_words(action: str) -> str:
    """What a propagation did to a dependant, in words: "notice_sent" → "notice sent to the agent"."""
    return PROPAGATION_WORDS.get(action) or action.replace("_", " ")


def action_words(action: str) -> str:
    """An audit action in words: "record.excluded" → "excluded from context"."""
    return ACTION_WORDS.get(action) or action.replace(".", " ").replace("_", " ")
