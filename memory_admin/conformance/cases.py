"""The suite's cases as data (`cases/*.yaml`) and the variants generated from them.

A case is a fixed clock, principals, field policies, steps (facts told over time, derived items built on
them, the canonical source's answers, a deletion) and probes (what an agent asks or attempts, with the
expected outcome). Variants re-express a case so that a setup cannot pass by special-casing the six:
another time zone for every date, another revision format, other source and principal names, and
another order of arrival for the steps a case marks `any_order`. A variant is fully determined by
(seed, case name, variant number).
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

CASES_DIR = Path(__file__).resolve().parent / "cases"

ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:\d{2})")
TIME_ZONES = ["+09:00", "+00:00", "-05:00", "+05:30", "-08:00", "+13:00"]
REVISION_FORMATS = ["r{n}", "{n}", "v{n}", "rev-{n}", "iso"]
SOURCE_ALIASES = ["{name}", "{name}-v2", "sys-{name}", "{name}.internal"]
PRINCIPAL_SUFFIXES = ["", "-bot", "-svc", "-2"]
# Fields of a step or probe that are instants on the case's clock (shifted to the run's clock).
TIME_FIELDS = ("valid_from", "valid_to", "told_at", "due_at", "valid_at", "known_at")


@dataclass
class Case:
    """One runnable case (a base case or a variant of one)."""

    name: str
    base: str
    variant: int
    title: str
    clock: datetime
    principals: list[str]
    policies: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    probes: list[dict[str, Any]]
    failure: str = "timeout"
    revision_format: str = "r{n}"
    description: dict[str, str] = field(default_factory=dict)
    #: run clock minus case clock: the run replays the case around its own "now" (set by the runner)
    offset: timedelta = timedelta(0)

    def at(self, text: str) -> datetime:
        """An instant of the case, moved onto the run's clock."""
        return parse_time(text) + self.offset

    def revision(self, number: int) -> str:
        return revision_text(number, self.revision_format, self.clock)

    @property
    def project(self) -> str:
        return self.name.replace("~", "-v")


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no offset")
    return moment


def load_base_cases(directory: Path = CASES_DIR) -> list[dict[str, Any]]:
    """The base cases, in file order."""
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for key in ("name", "title", "clock", "principals", "steps", "probes"):
            if key not in data:
                raise ValueError(f"{path.name}: missing {key!r}")
        cases.append(data)
    return cases


def _flatten(steps: list[dict[str, Any]], rng: random.Random | None) -> list[dict[str, Any]]:
    """Steps in arrival order; an `any_order` group is shuffled by `rng` (kept as written without one), and
    its `told_at` instants stay in ascending order so record time still follows arrival."""
    out: list[dict[str, Any]] = []
    for step in steps:
        if "any_order" not in step:
            out.append(step)
            continue
        group = [copy.deepcopy(s) for s in step["any_order"]]
        told = sorted((s[next(iter(s))].get("told_at") for s in group), key=lambda t: parse_time(t) if t else 0)
        if rng is not None:
            rng.shuffle(group)
        for item, when in zip(group, told, strict=True):
            if when:
                item[next(iter(item))]["told_at"] = when
        out.extend(group)
    return out


def _walk(value: Any, fn: Any) -> Any:
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    return fn(value)


def _in_zone(offset: str) -> Any:
    sign = -1 if offset.startswith("-") else 1
    hours, minutes = (int(p) for p in offset[1:].split(":"))
    zone = timezone(sign * timedelta(hours=hours, minutes=minutes))

    def convert(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return ISO_DATETIME.sub(lambda m: parse_time(m.group(0)).astimezone(zone).isoformat(), value)

    return convert


def _rename(value: Any, names: dict[str, str], prefixes: dict[str, str]) -> Any:
    if not isinstance(value, str):
        return value
    if value in names:
        return names[value]
    for old, new in prefixes.items():
        if value.startswith(old):
            return new + value[len(old) :]
    return value


def revision_text(number: int, fmt: str, clock: datetime) -> str:
    """A source revision in the variant's format; "iso" is a timestamp that orders like the number."""
    if fmt == "iso":
        return (
            clock.replace(year=2020, month=1, day=1, hour=0, minute=0, second=0) + timedelta(hours=number)
        ).isoformat()
    return fmt.format(n=number)


def build(data: dict[str, Any], variant: int, seed: int) -> Case:
    """Variant 0 is the case as written; variant n > 0 draws its changes from Random((seed, name, n))."""
    data = copy.deepcopy(data)
    rng = random.Random(f"{seed}:{data['name']}:{variant}") if variant else None
    steps = _flatten(data["steps"], rng)
    probes = data["probes"]
    policies = data.get("policies") or []
    principals = list(data["principals"])
    clock_text = data["clock"]
    revision_format = "r{n}"
    failures = data.get("failure") or ["timeout"]
    failure = failures[0]
    description = {"time zone": clock_text[-6:], "revisions": revision_format, "arrival": "as written"}
    if rng is not None:
        offset = rng.choice(TIME_ZONES)
        convert = _in_zone(offset)
        steps, probes, clock_text = _walk(steps, convert), _walk(probes, convert), convert(clock_text)
        revision_format = rng.choice(REVISION_FORMATS)
        suffix = rng.choice(PRINCIPAL_SUFFIXES)
        names = {p: f"{p}{suffix}" for p in principals}
        prefixes = {}
        for policy in policies:
            prefix = policy.get("canonical_prefix") or ""
            if prefix.endswith(":"):
                prefixes[prefix] = rng.choice(SOURCE_ALIASES).format(name=prefix[:-1]) + ":"
        rename = lambda v: _rename(v, names, prefixes)  # noqa: E731
        steps, probes, policies = _walk(steps, rename), _walk(probes, rename), _walk(policies, rename)
        principals = [names[p] for p in principals]
        failure = rng.choice(failures)
        description = {
            "time zone": offset,
            "revisions": revision_format,
            "sources": ", ".join(f"{k}→{v}" for k, v in prefixes.items()) or "as written",
            "principals": f"suffix {suffix!r}" if suffix else "as written",
            "arrival": " → ".join(s[next(iter(s))].get("id", next(iter(s))) for s in steps),
            "failing source": failure,
        }
    clock = parse_time(clock_text)
    for step in steps:
        fact = step.get("assert")
        if fact is not None:
            fact["revision"] = revision_text(int(fact["revision"]), revision_format, clock)
    return Case(
        name=data["name"] if not variant else f"{data['name']}~{variant}",
        base=data["name"],
        variant=variant,
        title=data["title"],
        clock=clock,
        principals=principals,
        policies=policies,
        steps=steps,
        probes=probes,
        failure=failure,
        revision_format=revision_format,
        description=description,
    )


def generate(variants: int, seed: int = 0, names: list[str] | None = None) -> list[Case]:
    """Every base case, each followed by `variants` generated variants."""
    cases: list[Case] = []
    for data in load_base_cases():
        if names and data["name"] not in names:
            continue
        cases.extend(build(data, n, seed) for n in range(variants + 1))
    return cases


def same_value(a: Any, b: Any) -> bool:
    """Equal values; two instants are equal whatever their offsets."""
    if isinstance(a, str) and isinstance(b, str) and ISO_DATETIME.fullmatch(a) and ISO_DATETIME.fullmatch(b):
        return parse_time(a) == parse_time(b)
    return bool(a == b)


def mentions(used: Any, value: Any) -> bool:
    """Whether `used` (a value or a text built on values) carries `value`."""
    if same_value(used, value):
        return True
    if isinstance(used, str) and isinstance(value, str):
        if value in used:
            return True
        if ISO_DATETIME.fullmatch(value):
            return any(parse_time(m.group(0)) == parse_time(value) for m in ISO_DATETIME.finditer(used))
    if isinstance(used, dict | list):
        items = used.values() if isinstance(used, dict) else used
        return any(mentions(item, value) for item in items)
    return False
