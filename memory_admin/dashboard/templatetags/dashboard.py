from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.reads import FRESHNESS_LABELS, freshness_of

register = template.Library()


@register.filter
def when(moment: datetime | None) -> str:
    """A date in the tenant's time zone, with the exact ISO time on hover."""
    if moment is None:
        return mark_safe('<span class="muted">—</span>')
    local = timezone.localtime(moment)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat(),
        local.isoformat(),
        local.strftime("%b %-d %Y, %H:%M"),
    )


@register.filter
def status_badge(status: str) -> str:
    return format_html('<span class="badge status-{}">{}</span>', status, status)


@register.filter
def freshness(record: MemoryRecord) -> str:
    state = freshness_of(record, timezone.now())
    return format_html('<span class="badge fresh-{}">{}</span>', state, FRESHNESS_LABELS[state])


@register.filter
def show_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, ensure_ascii=False)


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


@register.filter
def timesince_short(delta: Any) -> str:
    """A duration as "3 d", "5 h" or "12 min"."""
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400} d"
    if seconds >= 3600:
        return f"{seconds // 3600} h"
    return f"{max(seconds // 60, 0)} min"
