"""The deterministic probe agent, and the scoring of what it did.

For each probe the agent asks the target the way an agent would (a fact for answering or for acting, a
summary, a planned action, a loaded context and its notices), keeps everything — what was retrieved, the
context it would hand a model, the actions it attempted and whether they ran — and decides by fixed rules:
it stops when the memory layer says stop (or marks an item unusable), acts only when acting is allowed,
and otherwise uses what it was handed. No model is involved: the suite scores the memory layer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from memory_admin.conformance.cases import Case, mentions, same_value
from memory_admin.conformance.targets import Reading, Session, iter_steps


@dataclass
class ProbeRecord:
    case: str
    base: str
    variant: int
    probe: str
    kind: str
    expect: dict[str, Any]
    stale: list[Any]
    stopped: bool = False
    stop_reason: str = ""
    basis: Any = None
    executed: bool = False
    error: str = ""
    retrieval: list[Any] = field(default_factory=list)
    shown: list[Any] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.case}/{self.probe}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name}


def _line(label: str, value: Any, reading: Reading | None = None) -> str:
    text = f"{label}: {json.dumps(value, ensure_ascii=False, default=str)}"
    if reading is not None and reading.caveat:
        text += f" (caveat: {reading.caveat})"
    return text


class ProbeAgent:
    def __init__(self, case: Case, session: Session) -> None:
        self.case = case
        self.session = session
        self.steps = {step.get("id"): (kind, step) for kind, step in iter_steps(case) if step.get("id")}

    def run(self) -> list[ProbeRecord]:
        return [self.probe(p) for p in self.case.probes]

    def _record(self, probe: dict[str, Any], kind: str) -> ProbeRecord:
        return ProbeRecord(
            case=self.case.name,
            base=self.case.base,
            variant=self.case.variant,
            probe=probe["name"],
            kind=kind,
            expect=dict(probe.get("expect") or {}),
            stale=list(probe.get("stale") or []),
        )

    def probe(self, probe: dict[str, Any]) -> ProbeRecord:
        kind = next(k for k in ("ask", "act", "run_plan", "use_summary", "use_context") if k in probe)
        record = self._record(probe, kind)
        spec = probe[kind]
        try:
            getattr(self, f"_{kind}")(record, spec)
        except Exception as exc:  # a target that breaks on a probe fails it; the run goes on
            record.error = f"{type(exc).__name__}: {exc}"[:500]
            record.stopped, record.stop_reason = True, "error"
        return record

    def _keep(self, record: ProbeRecord, reading: Reading) -> None:
        record.retrieval.append(reading.raw)
        record.shown.extend(reading.shown)

    def _stop(self, record: ProbeRecord, reason: str) -> None:
        record.stopped, record.stop_reason = True, reason
        record.context.append(f"(stopped: {reason})")

    def _by(self, spec: dict[str, Any]) -> str:
        return str(spec.get("by") or self.case.principals[0])

    def _ask(self, record: ProbeRecord, spec: dict[str, Any]) -> None:
        reading = self.session.read_fact(
            self._by(spec),
            spec["subject"],
            spec["predicate"],
            valid_at=self.case.at(spec["valid_at"]) if spec.get("valid_at") else None,
            known_at=self.case.at(spec["known_at"]) if spec.get("known_at") else None,
        )
        self._keep(record, reading)
        if reading.stop or not reading.has_value:
            self._stop(record, reading.stop or "no value")
            return
        record.basis = reading.value
        record.context.append(_line(f"{spec['subject']}.{spec['predicate']}", reading.value, reading))

    def _act(self, record: ProbeRecord, spec: dict[str, Any]) -> None:
        reading = self.session.read_fact(self._by(spec), spec["subject"], spec["predicate"], purpose="action")
        self._keep(record, reading)
        attempt = {"kind": spec["kind"], "subject": spec["subject"], "allowed": False, "executed": False}
        record.actions.append(attempt)
        if reading.stop or not reading.has_value:
            self._stop(record, reading.stop or "no value")
            return
        record.basis = reading.value
        record.context.append(_line(f"{spec['subject']}.{spec['predicate']}", reading.value, reading))
        if not reading.action_allowed:
            self._stop(record, "action not allowed on this value")
            return
        if "requires" in spec and not same_value(reading.value, spec["requires"]):
            self._stop(record, f"{spec['predicate']} is {reading.value!r}")
            return
        attempt["allowed"] = attempt["executed"] = True  # the stub only records the call
        attempt["basis"] = reading.value
        record.executed = True

    def _base_values(self, ids: list[str]) -> list[Any]:
        return [self.steps[i][1]["value"] for i in ids if i in self.steps]

    def _run_plan(self, record: ProbeRecord, spec: dict[str, Any]) -> None:
        _, step = self.steps[spec["plan"]]
        reading = self.session.read_plan(self._by(spec), spec["plan"])
        self._keep(record, reading)
        attempt = {"kind": step["kind"], "plan": spec["plan"], "allowed": False, "executed": False}
        record.actions.append(attempt)
        if reading.stop or not reading.usable:
            self._stop(record, reading.stop or "plan not usable")
            return
        # Running the plan acts on what it was planned from.
        record.basis = {"payload": reading.value, "planned_from": self._base_values(step["from"])}
        attempt["allowed"] = attempt["executed"] = True
        record.executed = True

    def _use_summary(self, record: ProbeRecord, spec: dict[str, Any]) -> None:
        reading = self.session.read_summary(self._by(spec), spec["summary"])
        self._keep(record, reading)
        if reading.stop or not reading.usable:
            self._stop(record, reading.stop or "summary not usable")
            return
        record.basis = reading.value
        record.context.append(_line("summary", reading.value))

    def _use_context(self, record: ProbeRecord, spec: dict[str, Any]) -> None:
        """An agent with a loaded copy uses it unless the layer told it to reload; then it reads the fact."""
        by = self._by(spec)
        _, load = self.steps[spec["load"]]
        loaded = [
            self.steps[i][1]
            for i in load["from"]
            if self.steps[i][1]["subject"] == spec["subject"] and self.steps[i][1]["predicate"] == spec["predicate"]
        ]
        notices = self.session.open_notices(by, spec["load"])
        record.retrieval.append({"open_notices": notices})
        if not notices:
            record.basis = loaded[0]["value"]
            record.context.append(_line(f"{spec['subject']}.{spec['predicate']} (loaded copy)", record.basis))
            return
        reading = self.session.read_fact(by, spec["subject"], spec["predicate"])
        self._keep(record, reading)
        self.session.acknowledge(by, spec["load"])
        if reading.stop or not reading.has_value:
            self._stop(record, reading.stop or "no value")
            return
        record.basis = reading.value
        record.context.append(_line(f"{spec['subject']}.{spec['predicate']} (reloaded)", reading.value, reading))


# --- Scoring --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Count:
    key: str
    label: str
    better: str  # "low": n should be 0; "high": n should be d
    gate: bool = True  # part of "every count perfect"


COUNTS = [
    Count("stale_as_current", "stale values used as the current basis", "low"),
    Count("stale_shown", "stale values merely shown (not used)", "low", gate=False),
    Count("forbidden_executed", "forbidden actions executed", "low"),
    Count("valid_kept", "valid information kept", "high"),
    Count("right_stops", "right stops", "high"),
    Count("needless_stops", "needless stops", "low"),
]


def _judge(r: ProbeRecord) -> dict[str, tuple[bool, bool]]:
    """Per count: (in the denominator, counted in the numerator)."""
    wants_value = "value" in r.expect
    wants_stop = bool(r.expect.get("stop"))
    kept = (
        not r.error and not r.stopped and same_value(r.basis, r.expect.get("value")) and (r.executed or r.kind != "act")
    )
    stale_used = bool(r.error) or (r.basis is not None and any(mentions(r.basis, s) for s in r.stale))
    stale_shown = not stale_used and any(mentions(v, s) for v in r.shown for s in r.stale)
    return {
        "stale_as_current": (bool(r.stale), stale_used),
        "stale_shown": (bool(r.stale), stale_shown),
        "forbidden_executed": (wants_stop and r.kind in ("act", "run_plan"), r.executed or bool(r.error)),
        "valid_kept": (wants_value, kept),
        "right_stops": (wants_stop, r.stopped and not r.executed and not r.error),
        "needless_stops": (wants_value, r.stopped or bool(r.error)),
    }


def score(records: list[ProbeRecord]) -> dict[str, dict[str, Any]]:
    """Each count as n/d with the failing probe names (case/probe); never averaged."""
    out: dict[str, dict[str, Any]] = {c.key: {"n": 0, "d": 0, "failing": []} for c in COUNTS}
    for r in records:
        for count in COUNTS:
            in_d, in_n = _judge(r)[count.key]
            if not in_d:
                continue
            slot = out[count.key]
            slot["d"] += 1
            slot["n"] += int(in_n)
            failed = in_n if count.better == "low" else not in_n
            if failed:
                slot["failing"].append(r.name)
    return out


def perfect(counts: dict[str, dict[str, Any]]) -> bool:
    return all(not counts[c.key]["failing"] for c in COUNTS if c.gate)
