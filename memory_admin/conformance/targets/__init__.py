"""Conformance targets: one module per memory setup, each registering one `Target` subclass.

A target turns a case's history into its own store (`session(case, source)`), and answers the probe agent's
questions the way that setup answers an agent (`Session.read_fact` etc.). Adding a target — another HTTP
memory service, say — is adding one file here that calls `register`; the command and the page list the
registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_admin.conformance.cases import Case
from memory_admin.conformance.source import SourceScript


@dataclass
class Reading:
    """What the memory layer handed the agent for one question.

    `stop` is the reason the layer gave for not answering (or not allowing the action); `usable` is False when
    the layer says the item must not be used (a stale summary, a suspended plan); `shown` is every value the
    answer put in front of the agent (value, last verified value, candidates)."""

    value: Any = None
    has_value: bool = False
    stop: str = ""
    status: str = ""
    usable: bool = True
    caveat: str = ""
    action_allowed: bool = True
    shown: list[Any] = field(default_factory=list)
    raw: Any = None


class Session(ABC):
    """One case's world in one target: built from the case's steps, then read by the probe agent."""

    @abstractmethod
    def read_fact(
        self,
        by: str,
        subject: str,
        predicate: str,
        *,
        purpose: str = "answer",
        valid_at: datetime | None = None,
        known_at: datetime | None = None,
    ) -> Reading: ...

    @abstractmethod
    def read_summary(self, by: str, summary: str) -> Reading: ...

    @abstractmethod
    def read_plan(self, by: str, plan: str) -> Reading: ...

    @abstractmethod
    def open_notices(self, by: str, load: str) -> list[str]:
        """The case ids of the facts in `load` the layer has told `by` to reload (not yet acknowledged)."""

    @abstractmethod
    def acknowledge(self, by: str, load: str) -> None: ...


class Target(ABC):
    name: str = ""
    label: str = ""
    description: str = ""
    #: the system under test (its failures make the command exit non-zero), not a baseline
    is_product: bool = False

    @abstractmethod
    def session(self, case: Case, source: SourceScript, source_url: str) -> AbstractContextManager[Session]:
        """Build the case's history in a fresh, throwaway store, yield it, clean it up."""


TARGETS: dict[str, type[Target]] = {}


def register(target: type[Target]) -> type[Target]:
    TARGETS[target.name] = target
    return target


def discover() -> dict[str, type[Target]]:
    """Import every module of this package once (each registers its target)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return TARGETS


def get_target(name: str) -> Target:
    targets = discover()
    if name not in targets:
        raise KeyError(f"Unknown target {name!r}; known: {', '.join(sorted(targets))}")
    return targets[name]()


def target_names() -> list[str]:
    """Registered targets, the product first."""
    return sorted(discover(), key=lambda n: (not TARGETS[n].is_product, n))


def iter_steps(case: Case) -> Iterator[tuple[str, dict[str, Any]]]:
    """The case's steps in arrival order, as (kind, fields): `assert`, `summary`, `plan`, `load`, `source`,
    `delete`."""
    for step in case.steps:
        kind = next(iter(step))
        yield kind, step[kind]
