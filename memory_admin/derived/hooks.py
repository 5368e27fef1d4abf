"""The derived stores' extension points: the layers above (deletion) register here, derived calls them.

Like `memory.hooks`, this registry names no app; deletion registers in its `AppConfig.ready()`. The write
guards that concern memory records (a write built on a record, the scope around a write's transaction) are
memory's (`memory.hooks`); only what is about the derived stores' own items lives here.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol


class EventGuard(Protocol):
    def __call__(self, tenant_id: int, project_id: str, subject_ids: Iterable[str], occurred_at: datetime, /) -> None:
        """Refuse (raise a DomainError) a log line about `subject_ids` that happened at `occurred_at`; called
        inside the event's transaction, before it is written."""


_event_guards: list[EventGuard] = []


def add_event_guard(hook: EventGuard) -> EventGuard:
    # ready() may run more than once in one process (test runners); a hook is registered once.
    if hook not in _event_guards:
        _event_guards.append(hook)
    return hook


def remove_event_guard(hook: EventGuard) -> None:
    while hook in _event_guards:
        _event_guards.remove(hook)


def guard_event(tenant_id: int, project_id: str, subject_ids: Iterable[str], occurred_at: datetime) -> None:
    subjects = list(subject_ids)
    for hook in _event_guards:
        hook(tenant_id, project_id, subjects, occurred_at)
