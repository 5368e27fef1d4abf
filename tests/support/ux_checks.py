"""What a person must never read on a page: ISO timestamps, ISO or clock-style durations, JSON, and Python
reprs (dicts, lists, objects). Import `assert_reads_as_people` from any test that renders a page:

    from tests.support.ux_checks import assert_reads_as_people
    assert_reads_as_people(client.get("/").content.decode(), page="/")

Only the text a person reads is checked: attributes (`<time datetime>`, `title`, form values, links) may
carry exact machine values, and `<script>`/`<style>`/`<textarea>` content is skipped.
"""

from __future__ import annotations

import re
from functools import cache
from html.parser import HTMLParser
from typing import Any

# Each a pattern of machine text, with what it is.
FORBIDDEN = [
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"), "an ISO date-time"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "an ISO date"),
    (
        re.compile(r"\b\d+ days?, \d{1,2}:\d{2}:\d{2}\b|(?<![\w:])\d{1,2}:\d{2}:\d{2}(?:\.\d+)?(?![\w:])"),
        "a clock duration",
    ),
    (re.compile(r"\bP(?:\d+[YMWD])+(?:T(?:\d+[HMS])+)?\b|\bPT(?:\d+[HMS])+\b"), "an ISO duration"),
    (re.compile(r"\{\s*['\"]"), "a dict or JSON object"),
    (re.compile(r"\[\s*['\"{\[]|\[\s*\]|\{\s*\}"), "a list or JSON array"),
    (re.compile(r"['\"]\s*:\s*['\"\d\[{]"), "a key: value pair of JSON or a dict"),
    (
        re.compile(r"<\w+(?:\.\w+)* object at 0x|\bdatetime\.(?:datetime|date|timedelta)\(|\bDecimal\('|\bUUID\('"),
        "a Python repr",
    ),
    (re.compile(r"<(?:MemoryRecord|Dispute|Principal|AuditEvent|QuerySet)\b"), "a model repr"),
    # Internal ids and keys (issue 34, item 1): objects are shown by what they are; ids only in a detail.
    (re.compile(r"\b(?:evt|sum|act|ctx|inv|dsp|exq|del)-[0-9a-f]{8,}"), "an internal id"),
    (re.compile(r"\b[0-9a-f]{32,}\b"), "a hex key or hash"),
    (re.compile(r"\b(?:Token|Field policy|Principal|Tenant|Project) \d+\b|\bobject \(\d+\)"), "a row's number"),
]

_SKIPPED = {"script", "style", "textarea", "template"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def visible_text(html: str) -> list[str]:
    """The text nodes of a page a person reads (no attributes, scripts or styles)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.parts


def _subclasses(cls: type[Any]) -> set[type[Any]]:
    found: set[type[Any]] = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


@cache
def product_codes() -> frozenset[str]:
    """The product's own codes a person must not read: every choice of the project's models (statuses, states,
    kinds, outcomes), every audit action, every propagation step and every domain error's code — those written with
    an underscore or a dot (`purge_confirmed`, `marked_unusable`, `record.excluded`, `recheck_required`); a plain
    word such as "accepted" is English too. Built from the code, so a new status is checked without a list here."""
    from django.apps import apps
    from django.db import models

    from memory_admin.dashboard import wording
    from memory_admin.lib.errors import DomainError
    from memory_admin.memory import audit

    values: set[str] = {str(v) for v in audit.Action.values} | set(wording.PROPAGATION_WORDS)
    for model in apps.get_models():
        if not model.__module__.startswith(("memory_admin.", "deletion.")):
            continue
        for attribute in vars(model).values():
            if isinstance(attribute, type) and issubclass(attribute, models.Choices):
                values |= {str(v) for v in attribute.values}
    values |= {str(getattr(error, "code", "")) for error in _subclasses(DomainError)}
    return frozenset(v for v in values if "_" in v or "." in v)


@cache
def _codes_pattern() -> Any:
    codes = sorted(product_codes(), key=len, reverse=True)
    return re.compile(r"(?<![\w.:/{-])(?:" + "|".join(map(re.escape, codes)) + r")(?![\w-]|\.\w)")


def machine_text(html: str) -> list[tuple[str, str]]:
    """(what, text) for each text node that shows machine text to a person; [] when the page reads well."""
    found = []
    codes = _codes_pattern()
    for text in visible_text(html):
        for pattern, what in FORBIDDEN:
            if pattern.search(text):
                found.append((what, text[:200]))
                break
        else:
            code = codes.search(text)
            if code:
                found.append((f"the product's code {code.group()!r}", text[:200]))
    return found


def assert_reads_as_people(html: str, *, page: str = "") -> None:
    """Fail, naming each offending piece of text, when the page shows a person machine text."""
    found = machine_text(html)
    assert not found, f"{page or 'the page'} shows machine text: " + "; ".join(f"{w}: {t!r}" for w, t in found)
