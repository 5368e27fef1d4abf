"""Run the cases against targets and score them: the one entry point of the command, the task and the tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils import timezone

from memory_admin.conformance import cases as case_data
from memory_admin.conformance import source
from memory_admin.conformance.agent import COUNTS, ProbeAgent, ProbeRecord, perfect, score
from memory_admin.conformance.targets import Target, get_target, origin, problems, target_names

DEFAULT_VARIANTS = 4
Progress = Callable[[int, int, str], None]


def resolve_targets(names: list[str] | str) -> list[str]:
    """Target names: `all` is every registered target."""
    if names == "all" or names == ["all"]:
        return target_names()
    return [names] if isinstance(names, str) else list(names)


def _failed_case(case: case_data.Case, error: str) -> list[ProbeRecord]:
    records = []
    for probe in case.probes:
        kind = next(k for k in ("ask", "act", "run_plan", "use_summary", "use_context") if k in probe)
        records.append(
            ProbeRecord(
                case=case.name,
                base=case.base,
                variant=case.variant,
                probe=probe["name"],
                kind=kind,
                expect=dict(probe.get("expect") or {}),
                stale=list(probe.get("stale") or []),
                stopped=True,
                stop_reason="error",
                error=error,
            )
        )
    return records


def run_suite(
    targets: list[Target] | list[str] | str = "all",
    *,
    variants: int = DEFAULT_VARIANTS,
    seed: int = 0,
    only: list[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every case (and `variants` variants of each) against every target; a JSON-ready result.

    Each case replays around the run's clock: its instants are moved by (now - the case's clock), so "today"
    and "tomorrow" of the case are today and tomorrow for the target too.
    """
    chosen: list[Target] = []
    # Named targets this process does not have (a plug-in installed where the page ran, not in the worker) are
    # reported, like the entry points discovery skipped; the run goes on with the others.
    skipped = [str(p) for p in problems()]
    wanted: list[Target | str] = [*(resolve_targets(targets) if isinstance(targets, str) else targets)]
    for t in wanted:
        try:
            chosen.append(t if isinstance(t, Target) else get_target(t))
        except KeyError:
            skipped.append(f"target {t!r} is not registered in this process; it was not run")
        except Exception as exc:  # a plug-in whose constructor fails is skipped, not the run
            skipped.append(f"target {t!r} could not be created ({type(exc).__name__}: {exc}); it was not run"[:500])
    cases = case_data.generate(variants, seed, only)
    total, done = len(cases) * len(chosen), 0
    started = timezone.now()
    results: list[dict[str, Any]] = []
    with source.serving() as (url, script):
        for target in chosen:
            records: list[ProbeRecord] = []
            for case in cases:
                if progress:
                    progress(done, total, f"{target.name}: {case.name}")
                case.offset = timezone.now().replace(second=0, microsecond=0) - case.clock
                try:
                    with target.session(case, script, url) as session:
                        records.extend(ProbeAgent(case, session).run())
                except Exception as exc:  # one broken case is that case's failure, not the run's
                    records.extend(_failed_case(case, f"{type(exc).__name__}: {exc}"[:500]))
                done += 1
            counts = score(records)
            results.append(
                {
                    "name": target.name,
                    "label": target.label,
                    "description": target.description,
                    "is_product": target.is_product,
                    "origin": origin(target.name),
                    "counts": counts,
                    "perfect": perfect(counts),
                    "probes": [r.as_dict() for r in records],
                }
            )
    if progress:
        progress(done, total, "done")
    return {
        "seed": seed,
        "variants": variants,
        "started_at": started.isoformat(),
        "finished_at": timezone.now().isoformat(),
        "counts": [{"key": c.key, "label": c.label, "better": c.better, "gate": c.gate} for c in COUNTS],
        "cases": [
            {"name": c.name, "base": c.base, "variant": c.variant, "title": c.title, "description": c.description}
            for c in cases
        ],
        "targets": results,
        "skipped": skipped,
    }


def product_failed(result: dict[str, Any]) -> bool:
    """Whether a product target (`this`) missed any gated count."""
    return any(t["is_product"] and not t["perfect"] for t in result["targets"])


def grouped(names: list[str]) -> list[tuple[str, int]]:
    """Failing names folded over variants: ("case/probe", in how many runs of the case — the base case and
    its variants — the probe failed)."""
    folded: dict[str, int] = {}
    for name in names:
        case, _, probe = name.partition("/")
        key = f"{case.split('~')[0]}/{probe}"
        folded[key] = folded.get(key, 0) + 1
    return sorted(folded.items())


def table(result: dict[str, Any]) -> str:
    """The side-by-side table: one column per target, one row per count (n/d), then the failing names."""
    targets = result["targets"]
    rows = [["count", *[t["name"] for t in targets]]]
    for count in result["counts"]:
        mark = "" if count["gate"] else " (informational)"
        better = "0 is right" if count["better"] == "low" else "all is right"
        rows.append(
            [
                f"{count['label']} [{better}]{mark}",
                *[f"{t['counts'][count['key']]['n']}/{t['counts'][count['key']]['d']}" for t in targets],
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        f"{len(result['cases'])} cases ({result['variants']} variants of each base case, seed {result['seed']})."
    )
    for t in targets:
        verdict = "every count right" if t["perfect"] else "FAILS"
        lines.append("")
        source = "" if t.get("origin", "built-in") == "built-in" else f", from {t['origin']}"
        lines.append(f"{t['name']} ({t['label']}{source}): {verdict}")
        for count in result["counts"]:
            failing = grouped(t["counts"][count["key"]]["failing"])
            if failing:
                shown = ", ".join(f"{name} (x{n})" if n > 1 else name for name, n in failing)
                lines.append(f"  {count['label']}: {shown}")
    for note in result.get("skipped") or []:
        lines.append("")
        lines.append(f"Skipped: {note}")
    return "\n".join(lines)
