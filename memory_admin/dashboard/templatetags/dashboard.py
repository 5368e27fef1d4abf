"""Template filters every dashboard page uses to say things in people's words (see dashboard/wording.py).

`when` (a date in the tenant's zone, ISO on hover), `ago` and `overdue` (relative times), `days_left`,
`duration`, `show_value` (values by type, never JSON or a repr), `caveat` (labelled parts), `action_words`,
plus the badges, `query_with` and `record_rows` (the records table's rows).

The filters a table calls once per cell build their HTML with `_html` (Django's `format_html` without its
lazy-string wrappers, the same output): a page of 50 records calls them several hundred times.
"""

from __future__ import annotations

import html
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Any
from urllib.parse import quote

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from memory_admin.dashboard import wording
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.reads import FRESHNESS_LABELS, freshness_of

register = template.Library()

_DASH = mark_safe('<span class="muted">—</span>')


def _esc(value: Any) -> str:
    """`conditional_escape` without its lazy-string wrapper: safe HTML as is, anything else escaped."""
    if hasattr(value, "__html__"):
        return str(value.__html__())
    return html.escape(str(value))


def _html(fmt: str, *args: Any) -> SafeString:
    """`format_html(fmt, *args)`, the same output, for the filters called once per table cell."""
    return SafeString(fmt.format(*map(_esc, args)))


def _moment(value: Any) -> datetime | date | None:
    """A datetime or date from a datetime, a date or an ISO string (the audit log stores ISO strings)."""
    if isinstance(value, datetime | date):
        return value
    if isinstance(value, str):
        return wording.parse_iso(value, timezone.get_current_timezone())
    return None


def _time(moment: datetime | date, text: str) -> SafeString:
    iso = moment.isoformat()
    return _html('<time datetime="{}" title="{}">{}</time>', iso, iso, text)


def _people(moment: datetime | date, zone: tzinfo | None = None) -> str:
    if isinstance(moment, datetime):
        return wording.people_datetime(moment, zone or timezone.get_current_timezone())
    return wording.people_date(moment)


@register.filter
def when(value: Any) -> SafeString:
    """ "Mon 2 Nov 2026, 17:00 JST" in the tenant's time zone, the exact ISO time on hover."""
    return _when(value)


def _when(value: Any, zone: tzinfo | None = None) -> SafeString:
    moment = _moment(value)
    if moment is None:
        return _DASH if value in (None, "") else _html("{}", value)
    return _time(moment, _people(moment, zone))


@register.filter
def ago(value: Any) -> SafeString:
    """ "3 days ago" / "in 5 hours", the date and ISO time on hover."""
    return _ago(value, timezone.now())


def _ago(value: Any, now: datetime, zone: tzinfo | None = None) -> SafeString:
    moment = _moment(value)
    if not isinstance(moment, datetime):
        return _when(value, zone)
    iso = moment.isoformat()
    return _html(
        '<time datetime="{}" title="{} ({})">{}</time>',
        iso,
        _people(moment, zone),
        iso,
        wording.relative(moment, now),
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
            return _html('<span class="money">{}</span>', shown.text)
        case "number":
            return _html('<span class="number">{}</span>', shown.text)
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
    return _html("{}", shown.text)


@register.filter
def show_value(value: Any, limit: Any = None) -> SafeString:
    """A stored value by its type: dates as dates, grouped numbers, money with its unit, mappings and lists
    as a small labelled table. With an argument (`show_value:60`, or `show_value:"inline"`) it is one line,
    cut at that many characters, the whole line on hover: use that in table cells instead of truncatechars
    (which would cut the markup)."""
    return _show_value(value, limit, timezone.get_current_timezone())


def _show_value(value: Any, limit: Any, zone: tzinfo) -> SafeString:
    shown = wording.show(value, zone)
    if limit is None or limit == "":
        return _render(shown)
    if shown.kind in ("date", "datetime", "empty", "money", "number"):
        return _render(shown)
    cut = int(limit) if str(limit).isdigit() else None
    text = wording.plain(value, zone, cut)
    if text != shown.text:
        return _html('<span title="{}">{}</span>', shown.text, text)
    return _html("{}", text)


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
def object_kind(object_type: str) -> str:
    """An audited object's kind in words: "field_policy" → "field policy"."""
    return wording.label(object_type).lower()


@register.filter
def propagation_words(action: str) -> str:
    return wording.propagation_words(action)


@register.filter
def version(revision: int, latest: Any = None) -> str:
    """ "version 2 of 3": the one revision numbering the fact page shows (wording.version)."""
    return wording.version(revision, int(latest) if latest else None)


@register.filter
def source_revision(revision: Any) -> str:
    """ "source r18": the source's own revision, a detail beside the version (wording.source_revision)."""
    return wording.source_revision(revision, timezone.get_current_timezone())


@register.filter
def copyable_id(value: Any, size: Any = 40) -> SafeString:
    """An internal id kept out of the text people read: a small read-only field they can select and copy (at
    most `size` characters wide; the whole id is still selected and copied)."""
    width = int(size) if str(size).isdigit() else 40
    return _html(
        '<input class="copy-id" readonly value="{}" aria-label="Id, to copy" size="{}">',
        value,
        min(len(str(value)), width),
    )


# A store's key or hash (a cache key such as fact:v2:<64 hex>): kept out of the text people read.
_KEY_LIKE = re.compile(r"[0-9a-f]{32,}")


def _key_like(value: Any) -> bool:
    return isinstance(value, str) and bool(_KEY_LIKE.search(value))


@register.filter
def has_keys(value: Any) -> bool:
    """Whether a list of a store's samples holds keys or hashes (shown with `samples`, not as text)."""
    return isinstance(value, list | tuple) and any(_key_like(v) for v in value)


@register.filter
def samples(values: Any, limit: Any = None) -> SafeString:
    """A store's samples (the first `limit` of them, then how many more): names as text, keys and hashes as
    copyable ids (never in the text people read)."""
    items = list(values) if isinstance(values, list | tuple) else [values]
    cut = int(limit) if limit not in (None, "") and str(limit).isdigit() else len(items)
    zone = timezone.get_current_timezone()
    shown = [copyable_id(v, 20) if _key_like(v) else _html("{}", wording.plain(v, zone, 40)) for v in items[:cut]]
    more = _html(' <span class="muted">and {} more</span>', len(items) - cut) if len(items) > cut else ""
    return mark_safe(", ".join(shown) + more)  # each piece escaped above


@register.filter
def status_badge(status: str) -> SafeString:
    return _html('<span class="badge status-{}">{}</span>', status, status)


@register.filter
def freshness(record: MemoryRecord) -> SafeString:
    return _freshness(record, timezone.now())


def _freshness(record: Any, now: datetime) -> SafeString:
    """`record`: a MemoryRecord or a RecordRow (the rule reads `last_verified_at` and `recheck_after`)."""
    state = freshness_of(record, now)
    return _html('<span class="badge fresh-{}">{}</span>', state, FRESHNESS_LABELS[state])


@register.filter
def scheduled(record: MemoryRecord) -> SafeString:
    """A "scheduled" badge on a record whose valid time has not begun (it answers from `valid_from`)."""
    return _scheduled(record, timezone.now())


def _scheduled(record: MemoryRecord | RecordRow, now: datetime, zone: tzinfo | None = None) -> SafeString:
    if record.valid_from and record.valid_from > now and record.status == MemoryRecord.Status.ACCEPTED:
        return _html(
            '<span class="badge status-scheduled" title="Not yet in effect: it answers from {}">scheduled</span>',
            _people(record.valid_from, zone),
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


@dataclass(slots=True, frozen=True)
class RecordRow:
    """What a row of the records table shows: a record's columns, its project's key and its issuer's name.
    The records page fetches these as values (RECORD_ROW_COLUMNS, in this order), not as model instances:
    building 50 MemoryRecord, Project and Principal objects cost more CPU than rendering the rows."""

    id: int
    memory_id: str
    subject_id: str
    predicate: str
    value: Any
    status: str
    valid_from: datetime
    recorded_from: datetime
    last_verified_at: datetime | None
    recheck_after: datetime | None
    revision: int
    source_canonical_ref: str
    source_revision: str
    project_id: int
    project_key: str
    issuer_name: str

    @property
    def pk(self) -> int:
        return self.id


# RecordRow's fields as query columns, in its order: `values_list(*RECORD_ROW_COLUMNS)` rows build it.
RECORD_ROW_COLUMNS = (
    *(f for f in RecordRow.__dataclass_fields__ if f not in ("project_key", "issuer_name")),
    "project__key",
    "issuer__name",
)


# One row of the records table (templates/dashboard/records.html), as the template wrote it before this tag:
# the same markup, byte for byte (tests/dashboard/test_records_page_at_scale.py compares them). A page of 50 rows
# through the template engine cost ~70% of the page's CPU; built here it is a few string formats per row.
_GROUP_ROW = (
    '\n        <tr class="group-row"><th scope="rowgroup" colspan="{colspan}"><a href="{href}">{subject} · '
    '{predicate}</a> <span class="muted">in {project}</span></th></tr>\n        '
)
_SELECT_CELL = (
    '<td class="select-col"><input type="checkbox" name="ids" value="{memory_id}" aria-label="Select {memory_id}"'
    ' title="{subject} · {predicate}, revision {revision}"{checked}></td>'
)
_ROW = (
    '\n        <tr id="{memory_id}">\n          {select}\n'
    '          <td><a href="{href}">{subject} · {predicate}</a></td>\n'
    '          <td class="value">{value}</td>\n'
    "          <td>{status} {scheduled}</td>\n"
    "          <td>{freshness}</td>\n"
    '          <td title="issued by {issuer}"><code>{source}</code> {source_revision}</td>\n'
    "          <td>{valid_from}</td>\n"
    "          <td>{revision}</td>\n"
    "          <td>{recorded}</td>\n"
    "          <td>{project}</td>\n"
    "        </tr>\n      "
)
_NOT_RECHECKED = '<span class="muted" title="History is not rechecked">—</span>'
SOURCE_CHARS = 40  # the source column's width, in characters (cut with "…")


def _short(text: str, limit: int) -> str:
    """`text|truncatechars:limit` (Truncator counts characters after NFC normalisation, combining ones aside)."""
    if text.isascii() and len(text) <= limit:
        return text
    return str(Truncator(text).chars(limit))


@register.simple_tag
def record_rows(
    rows: Sequence[RecordRow],
    group_starts: Collection[int],
    can_curate: bool,
    select_all: bool,
    records_url: str,
    now: datetime,
) -> SafeString:
    """The records table's rows: a header row where a fact's group starts (history grouped by fact), then
    the record: its selection box (for a curator), subject · predicate linking to the record, the value,
    status badge, freshness (accepted records only), source, valid from, revision, recorded, project.

    Every value is escaped; the cells are the filters the template used (`show_value`, `status_badge`,
    `scheduled`, `freshness`, `when`, `ago`), at one `now` and in one time zone for the page."""
    zone = timezone.get_current_timezone()
    esc = html.escape
    colspan = "10" if can_curate else "9"
    checked = " checked" if select_all else ""
    base = esc(records_url)
    out = []
    for r in rows:
        memory_id, subject, predicate = esc(r.memory_id), esc(r.subject_id), esc(r.predicate)
        href = f"{base}{esc(quote(r.memory_id, safe='/'))}/"
        project = esc(r.project_key)
        out.append("\n        ")
        if r.pk in group_starts:
            out.append(
                _GROUP_ROW.format(colspan=colspan, href=href, subject=subject, predicate=predicate, project=project)
            )
        revision = str(r.revision)
        select = ""
        if can_curate:
            select = _SELECT_CELL.format(
                memory_id=memory_id, subject=subject, predicate=predicate, revision=revision, checked=checked
            )
        accepted = r.status == MemoryRecord.Status.ACCEPTED
        out.append(
            _ROW.format(
                memory_id=memory_id,
                select=select,
                href=href,
                subject=subject,
                predicate=predicate,
                value=_show_value(r.value, 80, zone),
                status=status_badge(r.status),
                scheduled=_scheduled(r, now, zone),
                freshness=_freshness(r, now) if accepted else _NOT_RECHECKED,
                issuer=esc(r.issuer_name),
                source=esc(_short(r.source_canonical_ref, SOURCE_CHARS)),
                source_revision=_show_value(r.source_revision, 30, zone),
                valid_from=_when(r.valid_from, zone),
                revision=revision,
                recorded=_ago(r.recorded_from, now, zone),
                project=project,
            )
        )
    return SafeString("".join(out))


@dataclass(frozen=True)
class MenuLink:
    label: str
    url: str
    current: bool


@register.simple_tag
def main_nav(request: Any) -> list[MenuLink]:
    """The menu's links for the signed-in person: the entries of dashboard/nav.py their roles open (the same
    rule each page's view enforces), the current page marked."""
    from django.urls import reverse

    from memory_admin.dashboard import nav

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    match = getattr(request, "resolver_match", None)
    current = match.url_name if match is not None and match.namespace == "dashboard" else None
    return [
        MenuLink(entry.label, reverse(f"dashboard:{entry.url_name}"), entry.url_name == current)
        for entry in nav.visible_to(user)
    ]
