"""Template filters every dashboard page uses to say things in people's words (see dashboard/wording.py).

`when` (a date in the tenant's zone, ISO on hover), `ago` and `overdue` (relative times), `days_left`,
`duration`, `show_value` (values by type, never JSON or a repr), `caveat` (labelled parts), `action_words`,
plus the badges and `query_with`.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from memory_admin.dashboard import wording
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.reads import FRESHNESS_LABELS, freshness_of

register = template.Library()

_DASH = mark_safe('<span class="muted">—</span>')


def _moment(value: Any) -> datetime | date | None:
    """A datetime or date from a datetime, a date or an ISO string (the audit log stores ISO strings)."""
    if isinstance(value, datetime | date):
        return value
    if isinstance(value, str):
        return wording.parse_iso(value, timezone.get_current_timezone())
    return None


def _time(moment: datetime | date, text: str) -> SafeString:
    iso = moment.isoformat()
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, iso, text)


def _people(moment: datetime | date) -> str:
    if isinstance(moment, datetime):
        return wording.people_datetime(moment, timezone.get_current_timezone())
    return wording.people_date(moment)


@register.filter
def when(value: Any) -> SafeString:
    """ "Mon 2 Nov 2026, 17:00 JST" in the tenant's time zone, the exact ISO time on hover."""
    moment = _moment(value)
    if moment is None:
        return _DASH if value in (None, "") else format_html("{}", value)
    return _time(moment, _people(moment))


@register.filter
def ago(value: Any) -> SafeString:
    """ "3 days ago" / "in 5 hours", the date and ISO time on hover."""
    moment = _moment(value)
    if not isinstance(moment, datetime):
        return when(value)
    iso = moment.isoformat()
    return format_html(
        '<time datetime="{}" title="{} ({})">{}</time>',
        iso,
        _people(moment),
        iso,
        wording.relative(moment, timezone.now()),
    )


relative = register.filter("relative", ago)


@register.filter
def overdue(value: Any) -> str:
    """ "39 days overdue" or "due in 3 days" (plain text)."""
    moment = _moment(value)
    if not isinstance(moment, datetime):
        return ""
    return wording.overdue(moment, timezone.now())


@register.filter
def days_left(value: Any) -> str:
    """ "12 days left", "due today" or "3 days late" against a deadline (plain text)."""
    moment = _moment(value)
    if not isinstance(moment, datetime):
        return ""
    return wording.days_left(moment, timezone.now())


@register.filter
def duration(value: timedelta | int | float | None) -> str:
    """ "1 day", "2 hours 30 minutes": never "1 day, 0:00:00" or an ISO duration."""
    return wording.duration(value)


@register.filter
def timesince_short(delta: Any) -> str:
    """Kept for older templates: a duration in words (see `duration`)."""
    return wording.duration(delta, parts=1)


def _render(shown: wording.Shown) -> SafeString:
    match shown.kind:
        case "empty":
            return mark_safe('<span class="muted">none</span>')
        case "date" | "datetime":
            assert shown.moment is not None
            return _time(shown.moment, shown.text)
        case "money":
            return format_html('<span class="money">{}</span>', shown.text)
        case "number":
            return format_html('<span class="number">{}</span>', shown.text)
        case "pairs":
            body = format_html_join(
                "", '<tr><th scope="row">{}</th><td>{}</td></tr>', ((k, _render(v)) for k, v in shown.parts)
            )
            return format_html('<table class="value-table"><tbody>{}</tbody></table>', body)
        case "items":
            return format_html(
                '<ul class="value-list">{}</ul>',
                format_html_join("", "<li>{}</li>", ((_render(i),) for i in shown.items)),
            )
        case "rows":
            head = format_html_join("", '<th scope="col">{}</th>', ((c,) for c in shown.columns))
            rows = format_html_join(
                "",
                "<tr>{}</tr>",
                ((format_html_join("", "<td>{}</td>", ((_render(c),) for c in row)),) for row in shown.rows),
            )
            return format_html(
                '<table class="value-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, rows
            )
    return format_html("{}", shown.text)


@register.filter
def show_value(value: Any, limit: Any = None) -> SafeString:
    """A stored value by its type: dates as dates, grouped numbers, money with its unit, mappings and lists
    as a small labelled table. With an argument (`show_value:60`, or `show_value:"inline"`) it is one line,
    cut at that many characters, the whole line on hover: use that in table cells instead of truncatechars
    (which would cut the markup)."""
    zone = timezone.get_current_timezone()
    shown = wording.show(value, zone)
    if limit is None or limit == "":
        return _render(shown)
    if shown.kind in ("date", "datetime", "empty", "money", "number"):
        return _render(shown)
    cut = int(limit) if str(limit).isdigit() else None
    text = wording.plain(value, zone, cut)
    if text != shown.text:
        return format_html('<span title="{}">{}</span>', shown.text, text)
    return format_html("{}", text)


@register.filter
def plain_value(value: Any, limit: Any = None) -> str:
    """A value as one line of plain text (for attributes, titles and sentences)."""
    cut = int(limit) if limit not in (None, "") and str(limit).isdigit() else None
    return wording.plain(value, timezone.get_current_timezone(), cut)


@register.simple_tag
def fact_caveat(view: Any, attempt: Any = None, manual: bool = False) -> SafeString:
    """`caveat` as a tag, for a field a person verifies ("awaiting manual verification")."""
    return caveat(view, attempt, manual=manual)


@register.filter
def caveat(view: Any, attempt: Any = None, *, manual: bool = False) -> SafeString:
    """A fact view's caveat as a sentence of labelled parts ("Last verified value: … on …; could not be
    confirmed now: …"), or nothing when its value is fresh. `attempt` is the record's latest recheck
    attempt, when the page has it (a failed one says why the value is not confirmed)."""
    if view is None:
        return mark_safe("")
    record = getattr(view, "record", None)
    if attempt is not None and getattr(attempt, "verified", True):
        attempt = None
    parts = wording.caveat_parts(
        freshness=getattr(view, "freshness", None),
        status=getattr(view, "status", None),
        last_verified_at=getattr(view, "last_verified_at", None),
        last_verified_value=getattr(view, "last_verified_value", None),
        recheck_after=getattr(record, "recheck_after", None),
        source=getattr(record, "source_canonical_ref", "") or "",
        attempt_outcome=getattr(attempt, "outcome", None),
        attempt_at=getattr(attempt, "attempted_at", None),
        attempt_error=getattr(attempt, "error", "") or "",
        manual=manual,
        now=timezone.now(),
    )
    if not parts:
        return mark_safe("")
    return caveat_html(parts)


def caveat_html(parts: list[wording.CaveatPart]) -> SafeString:
    rendered = []
    for part in parts:
        bits = []
        if part.value is not None or part.label == "Last verified value":
            bits.append(show_value(part.value, "inline"))
        if part.moment is not None:
            bits.append(format_html("on {}", when(part.moment)) if bits else when(part.moment))
        text = " ".join(bits)
        if part.text:
            text = f"{text}, {conditional_escape(part.text)}" if text else str(conditional_escape(part.text))
        rendered.append(
            format_html('<span class="caveat-part"><strong>{}:</strong> {}</span>', part.label, mark_safe(text))
        )
    return format_html('<p class="caveat">{}.</p>', mark_safe("; ".join(rendered)))


@register.filter
def action_words(action: str) -> str:
    return wording.action_words(action)


@register.filter
def status_badge(status: str) -> SafeString:
    return format_html('<span class="badge status-{}">{}</span>', status, status)


@register.filter
def freshness(record: MemoryRecord) -> SafeString:
    state = freshness_of(record, timezone.now())
    return format_html('<span class="badge fresh-{}">{}</span>', state, FRESHNESS_LABELS[state])


@register.filter
def scheduled(record: MemoryRecord) -> SafeString:
    """A "scheduled" badge on a record whose valid time has not begun (it answers from `valid_from`)."""
    if record.valid_from and record.valid_from > timezone.now() and record.status == MemoryRecord.Status.ACCEPTED:
        return format_html(
            '<span class="badge status-scheduled" title="Not yet in effect: it answers from {}">scheduled</span>',
            _people(record.valid_from),
        )
    return mark_safe("")


@register.simple_tag(takes_context=True)
def query_with(context: template.Context, **changes: Any) -> str:
    """The current query string with some parameters replaced (None drops one)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"
