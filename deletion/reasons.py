"""A deletion request's free-text reason without the values it erases (issue 35, item 5).

A reason is kept with the request and in its audit event for as long as the request is kept, after the values are
gone; an agent's `request_forget` once wrote "forget alice@example.com". So, when a request is filed, every value
of the scope found in the reason is replaced by REDACTED before the reason is stored or audited:

- the records' values (history included): each text in a value (a whole string, or each string inside a JSON
  object or list) and each number of four digits or more, matched without regard to case;
- every e-mail address inside those texts, and the subject id when it is an e-mail address.

Texts shorter than MIN_LENGTH characters are left alone ("yes", "on"): they would blank common words. An
identifier that is not an e-mail address (a subject id, a memory id, a predicate) stays: the request names its scope
by it anyway (docs/deletion.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from deletion.stores.base import Scope

REDACTED = "[redacted]"
MIN_LENGTH = 4
# Texts of one scope matched at most (a whole predicate may hold many values); the longest are kept.
MAX_NEEDLES = 20_000
_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")


def _texts(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 32:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        text = str(value)
        if sum(ch.isdigit() for ch in text) >= MIN_LENGTH:
            yield text
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item, depth + 1)


def needles(scope: Scope) -> list[str]:
    """The texts of the scope that must not stay in a reason, longest first."""
    found: set[str] = set()

    def add(texts: Iterable[str]) -> None:
        for text in texts:
            text = text.strip()
            if len(text) >= MIN_LENGTH:
                found.add(text.casefold())
            found.update(email.casefold() for email in _EMAIL.findall(text))

    for record in scope.records:
        add(_texts(record.value))
    add(subject for subject in scope.subjects if _EMAIL.fullmatch(subject.strip()))
    return sorted(found, key=lambda text: (-len(text), text))[:MAX_NEEDLES]


def redact(reason: str, scope: Scope) -> tuple[str, bool]:
    """`reason` with the scope's values replaced by REDACTED, and whether any was."""
    texts = needles(scope)
    if not texts or not reason:
        return reason, False
    pattern = re.compile("|".join(re.escape(text) for text in texts), re.IGNORECASE)
    redacted = pattern.sub(REDACTED, reason)
    return redacted, redacted != reason
