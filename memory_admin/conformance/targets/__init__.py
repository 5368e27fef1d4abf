"""Conformance targets: one module per memory setup, each registering one `Target` subclass.

A target turns a case's history into its own store (`session(case, source, source_url)`), and answers the probe
agent's questions the way that setup answers an agent (`Session.read_fact` etc.). The built-in targets are the
modules of this package; anyone else's memory system is one module of their own package, named in the entry-point
group `memory_governance.conformance_targets` (docs/conformance.md "Add your memory system"). The
command and the page list the registry. A broken entry point (it does not import, names no `Target`, or claims a
name already taken) is skipped and kept in `problems()`, with its reason, for the command and the page to show.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

from memory_admin.conformance.cases import Case
from memory_admin.conformance.source import SourceScript

ENTRY_POINT_GROUP = "memory_governance.conformance_targets"
# A target's name is a command-line choice, a column of the page and an item of ConformanceRun.targets, and is
# shown in "target: case" progress labels (ConformanceRun.current, 200 characters): lowercase letters, digits and
# inner hyphens, at most 40 characters. `all` is the command's word for every target.
NAME_PATTERN = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")
RESERVED_NAMES = frozenset({"all"})
MAX_LABEL = 80
MAX_DESCRIPTION = 300


@dataclass
class Reading:
    """What the memory layer handed the agent for one question.

    `has_value` says whether the layer answered with a value at all, and `value` is that answer; `stop` is the
    reason the layer gave for not answering (or not allowing the action), empty when it answered; `usable` is
    False when the layer says the item must not be used (a stale summary, a suspended plan); `action_allowed`
    is False when the value may be shown but not acted on; `caveat` is what the layer said alongside the value;
    `status` is the layer's own word for the item, if it has one; `shown` is every value the answer put in
    front of the agent (value, last verified value, candidates); `raw` is the layer's answer as it was, kept in
    the probe's record."""

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
    """One case's world in one target: built from the case's steps, then read by the probe agent.

    `by` is the case's principal asking (an agent's name in the case, e.g. `planner`); `subject` and
    `predicate` name the fact; `summary`, `plan` and `load` are the ids the case's steps gave those items."""

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
    ) -> Reading:
        """The fact as the layer hands it for `purpose` (`answer` or `action`): now, or as of `valid_at` (valid
        time: when the fact holds) and/or `known_at` (record time: what the layer believed then)."""

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
    #: the registry key: a command-line choice and a column of the report (NAME_PATTERN)
    name: str = ""
    #: the column's heading on the page
    label: str = ""
    description: str = ""
    #: the system under test (its failures make the command exit non-zero), not a baseline
    is_product: bool = False

    @abstractmethod
    def session(self, case: Case, source: SourceScript, source_url: str) -> AbstractContextManager[Session]:
        """Build the case's history in a fresh, throwaway store, yield it, clean it up."""


class TargetError(ValueError):
    """A target that cannot be registered (its reason is the message)."""


@dataclass(frozen=True)
class Problem:
    """An entry point of ENTRY_POINT_GROUP that was skipped, and why."""

    entry_point: str
    reason: str

    def __str__(self) -> str:
        return f"conformance target entry point {self.entry_point!r} skipped: {self.reason}"


TARGETS: dict[str, type[Target]] = {}
#: where each registered target came from: "built-in" or "entry point NAME (DISTRIBUTION)"
ORIGINS: dict[str, str] = {}
_PROBLEMS: list[Problem] = []
_BY_MODULE: dict[str, list[type[Target]]] = {}  # what each module registered when it was imported
_loaded = {"builtins": False, "plugins": False}
# Discovery runs once per process, possibly from several request threads at once; a plug-in's import may call
# register(), which loads the built-ins first, on the same thread.
_lock = threading.RLock()


def _is_builtin(target: type[Target]) -> bool:
    return target.__module__.startswith(f"{__name__}.")


def _check(target: Any) -> None:
    if not (isinstance(target, type) and issubclass(target, Target)):
        raise TargetError(f"{target!r} is not a subclass of {__name__}.Target")
    if getattr(target, "__abstractmethods__", None):
        raise TargetError(
            f"{target.__qualname__} leaves abstract methods: {', '.join(sorted(target.__abstractmethods__))}"
        )
    name = target.name
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or name in RESERVED_NAMES:
        raise TargetError(
            f"{target.__qualname__}.name {name!r} is not a target name (lowercase letters, digits and inner "
            f"hyphens, 1 to 40 characters; not {', '.join(sorted(RESERVED_NAMES))})"
        )
    for attribute, limit in (("label", MAX_LABEL), ("description", MAX_DESCRIPTION)):
        value = getattr(target, attribute)
        if not isinstance(value, str) or len(value) > limit or any(ord(c) < 32 for c in value):
            raise TargetError(f"{target.__qualname__}.{attribute} must be one line of at most {limit} characters")
    if not isinstance(target.is_product, bool):
        raise TargetError(f"{target.__qualname__}.is_product must be True or False")


def _same(a: type[Target], b: type[Target]) -> bool:
    """The same class, or the same class imported again (a reloaded module)."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def register(target: type[Target]) -> type[Target]:
    """Add a target to the registry (a class decorator). Registering the same class again is a no-op; a name
    another class holds is refused, and the built-ins are loaded first, so no plug-in takes a built-in's name."""
    _check(target)
    if not _is_builtin(target):
        _load_builtins()
    held = TARGETS.get(target.name)
    if held is not None and not _same(held, target):
        whose = "the built-in target" if _is_builtin(held) else "the target"
        raise TargetError(f"the name {target.name!r} is taken by {whose} {held.__module__}.{held.__qualname__}")
    TARGETS[target.name] = target
    ORIGINS.setdefault(target.name, "built-in" if _is_builtin(target) else target.__module__)
    known = _BY_MODULE.setdefault(target.__module__, [])
    known[:] = [k for k in known if not _same(k, target)] + [target]
    return target


def _load_builtins() -> None:
    with _lock:
        if _loaded["builtins"]:
            return
        _loaded["builtins"] = True
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")


def _plugin_targets(entry_point: EntryPoint) -> list[type[Target]]:
    """What an entry point names: a Target subclass, or a module that registers targets when imported."""
    loaded = entry_point.load()
    if isinstance(loaded, ModuleType):
        found = _BY_MODULE.get(loaded.__name__, [])
        if not found:
            raise TargetError(f"module {loaded.__name__} registers no Target (call register() on a Target subclass)")
        return list(found)
    return [loaded]


def _load_plugins() -> None:
    with _lock:
        if not _loaded["plugins"]:
            _loaded["plugins"] = True
            for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
                _load_plugin(entry_point)


def _load_plugin(entry_point: EntryPoint) -> None:
    """Register what one entry point names, or keep its problem."""
    dist = entry_point.dist.name if entry_point.dist is not None else "unknown distribution"
    label = f"{entry_point.name} = {entry_point.value} ({dist})"
    try:
        for target in _plugin_targets(entry_point):
            _check(target)
            if _is_builtin(target):
                raise TargetError(f"it names the built-in target {target.__qualname__}")
            register(target)
            ORIGINS[target.name] = f"entry point {entry_point.name} ({dist})"
    except Exception as exc:  # anything a third party's import does is that entry point's problem only
        reason = str(exc) if isinstance(exc, TargetError) else f"{type(exc).__name__}: {exc}"
        _PROBLEMS.append(Problem(label, reason[:500]))


def discover() -> dict[str, type[Target]]:
    """The registry: every module of this package (each registers its target), then the entry points of
    ENTRY_POINT_GROUP, each loaded once per process."""
    _load_builtins()
    _load_plugins()
    return TARGETS


def rediscover() -> dict[str, type[Target]]:
    """Forget the plug-ins and read the entry points again (after installing or removing one)."""
    with _lock:
        for name in [n for n, t in TARGETS.items() if not _is_builtin(t)]:
            del TARGETS[name]
            ORIGINS.pop(name, None)
        _PROBLEMS.clear()
        _loaded["plugins"] = False
    return discover()


def problems() -> list[Problem]:
    """The entry points discovery skipped, with their reasons."""
    discover()
    return list(_PROBLEMS)


def get_target(name: str) -> Target:
    targets = discover()
    if name not in targets:
        raise KeyError(f"Unknown target {name!r}; known: {', '.join(sorted(targets))}")
    return targets[name]()


def target_names() -> list[str]:
    """Registered targets: the product first, then the built-in baselines, then plug-ins, each by name."""
    targets = discover()
    return sorted(targets, key=lambda n: (not targets[n].is_product, not _is_builtin(targets[n]), n))


def origin(name: str) -> str:
    return ORIGINS.get(name, "built-in")


def iter_steps(case: Case) -> Iterator[tuple[str, dict[str, Any]]]:
    """The case's steps in arrival order, as (kind, fields): `assert`, `summary`, `plan`, `load`, `source`,
    `delete`."""
    for step in case.steps:
        kind = next(iter(step))
        yield kind, step[kind]
