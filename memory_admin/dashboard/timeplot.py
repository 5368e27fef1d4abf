"""The geometry of a fact's plot through time: valid time across, record time down.

Each version is a box over the valid period it claimed (left to right) and the period the system
believed it (top to bottom, `recorded_from` → `recorded_to`, open boxes run to "now"), labelled directly with
the numbering the page's history list uses ("version 2 of 3", wording.version) and, below it, its value and
what kind of version it is ("current answer", "imported late"), so the drawing needs no legend; the axes
carry dates in the app's format ("Mon 2 Nov 2026"). The current answer
sits where "now" on both axes falls; the as-of answer where the asked instants fall. Late imports (history
where a newer revision covers their valid time: never current, or answering only as of a stretch that had
ended when they arrived) and future-effective values (scheduled) get their own kind so the drawing tells
them apart. Pure arithmetic: the fact template draws the SVG from what `plot` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from memory_admin.dashboard import wording

WIDTH, HEIGHT = 720, 300
LEFT, TOP, RIGHT, BOTTOM = 96, 28, 16, 40  # margins: the valid-time axis is labelled below, record time on top
# What each kind of box is, said on the box itself.
KIND_WORDS = {
    "current": "current answer",
    "asof": "the as-of answer",
    "history": "history",
    "late": "imported late",
    "scheduled": "scheduled, not yet in effect",
    "excluded": "excluded",
    "disputed": "disputed",
    "expired": "expired",
    "superseded": "replaced",
}


@dataclass
class Box:
    memory_id: str
    kind: str  # current | asof | history | late | scheduled | excluded | disputed | expired | superseded
    x: float
    y: float
    w: float
    h: float
    label: str  # "version 2 of 3"
    detail: str  # its value and kind: "Mon 2 Nov 2026, 17:00 · current answer"
    title: str
    open_right: bool
    open_bottom: bool


@dataclass
class Tick:
    at: float
    label: str


@dataclass
class Marker:
    kind: str  # now | asof
    x: float
    y: float
    label: str


@dataclass
class Plot:
    width: int = WIDTH
    height: int = HEIGHT
    boxes: list[Box] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    now_x: float = 0.0
    now_y: float = 0.0
    plot_left: int = LEFT
    plot_top: int = TOP
    plot_right: int = WIDTH - RIGHT
    plot_bottom: int = HEIGHT - BOTTOM
    summary: str = ""

    @property
    def area_w(self) -> int:
        return self.plot_right - self.plot_left

    @property
    def area_h(self) -> int:
        return self.plot_bottom - self.plot_top


def _short(moment: datetime, zone: tzinfo | None, with_year: bool) -> str:
    """An axis date in the app's format: "Mon 2 Nov", with the year on the first tick and where it changes."""
    local = moment.astimezone(zone) if zone else moment
    return wording.people_date(local) if with_year else f"{local:%a} {local.day} {local:%b}"


def _scale(moments: list[datetime], low: float, high: float) -> Any:
    """An event scale: the distinct moments evenly spaced from `low` to `high` (a half step of margin at
    each end), linear between neighbours. A fact's versions cluster around a few instants weeks apart;
    a linear scale would crush them into a corner, this one gives each instant its own place."""
    points = sorted(set(moments))
    step = (high - low) / max(len(points), 1)
    places = [low + step * (i + 0.5) for i in range(len(points))]

    def at(moment: datetime) -> float:
        if moment <= points[0]:
            return round(places[0], 1)
        for i in range(len(points) - 1):
            a, b = points[i], points[i + 1]
            if a <= moment <= b:
                share = (moment - a).total_seconds() / max((b - a).total_seconds(), 1.0)
                return round(places[i] + (places[i + 1] - places[i]) * share, 1)
        return round(places[-1], 1)

    at.points = points  # type: ignore[attr-defined]
    return at


def _ticks(at: Any, zone: tzinfo | None, room: float) -> list[Tick]:
    """A label at each instant of the scale, skipping those that would overlap the previous one."""
    ticks: list[Tick] = []
    year = None
    for moment in at.points:
        place = at(moment)
        if ticks and place - ticks[-1].at < room:
            continue
        local_year = (moment.astimezone(zone) if zone else moment).year
        ticks.append(Tick(place, _short(moment, zone, with_year=local_year != year)))
        year = local_year
    return ticks


def _arrived_ended(record: Any) -> bool:
    """Recorded only after the valid time it answers for had ended: a late import that answers as of then only."""
    return record.valid_to is not None and record.valid_to <= record.recorded_from


def _kind(record: Any, current_id: str | None, asof_id: str | None, now: datetime) -> str:
    if record.memory_id == current_id:
        return "current"
    if record.memory_id == asof_id:
        return "asof"
    if record.status == "accepted" and record.valid_from > now:
        return "scheduled"
    if record.status in ("superseded", "accepted") and (not record.entered_current or _arrived_ended(record)):
        return "late"
    return str(record.status)


def plot(
    records: list[Any],
    *,
    now: datetime,
    current: Any = None,
    as_of: Any = None,
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
    zone: tzinfo | None = None,
) -> Plot:
    """Boxes, axis ticks and markers for `records` (one fact's versions) on a WIDTH by HEIGHT canvas."""
    result = Plot()
    if not records:
        return result
    moments = [now]
    for r in records:
        moments += [r.valid_from, r.recorded_from]
        moments += [m for m in (r.valid_to, r.recorded_to) if m is not None]
    moments += [m for m in (valid_at, known_at) if m is not None]
    first, last = min(moments), max(moments)
    valid_moments = [now] + [r.valid_from for r in records] + [r.valid_to for r in records if r.valid_to]
    known_moments = [now] + [r.recorded_from for r in records] + [r.recorded_to for r in records if r.recorded_to]
    x = _scale(valid_moments + ([valid_at] if valid_at else []), result.plot_left, result.plot_right - 60)
    y = _scale(known_moments + ([known_at] if known_at else []), result.plot_top, result.plot_bottom)
    result.x_ticks = _ticks(x, zone, 92)
    result.y_ticks = _ticks(y, zone, 14)
    result.now_x, result.now_y = x(now), y(now)
    current_id = current.memory_id if current is not None else None
    asof_id = as_of.memory_id if as_of is not None else None
    latest = max(r.revision for r in records)
    for r in sorted(records, key=lambda r: (r.recorded_from, r.valid_from)):
        kind = _kind(r, current_id, asof_id, now)
        x0, y0 = x(r.valid_from), y(r.recorded_from)
        x1 = x(r.valid_to) if r.valid_to is not None else result.plot_right
        y1 = y(r.recorded_to) if r.recorded_to is not None else y(now)
        value = wording.plain(r.value, zone, 28)
        named = wording.version(r.revision, latest)
        what = KIND_WORDS.get(kind, kind)
        valid = f"valid {wording.people_datetime(r.valid_from, zone)} → " + (
            wording.people_datetime(r.valid_to, zone) if r.valid_to else "open"
        )
        believed = f"believed {wording.people_datetime(r.recorded_from, zone)} → " + (
            wording.people_datetime(r.recorded_to, zone) if r.recorded_to else "now"
        )
        result.boxes.append(
            Box(
                memory_id=r.memory_id,
                kind=kind,
                x=x0,
                y=y0,
                w=max(x1 - x0, 3.0),
                h=max(y1 - y0, 6.0),
                label=named,
                detail=f"{value} · {what}",
                title=(
                    f"{named.capitalize()} ({what}): {wording.plain(r.value, zone)}; "
                    f"{wording.source_revision(r.source_revision, zone)}; {valid}; {believed}"
                ),
                open_right=r.valid_to is None,
                open_bottom=r.recorded_to is None,
            )
        )
    # Larger boxes first, so a version drawn inside another (a late import under today's answer) stays on
    # top, visible and clickable.
    result.boxes.sort(key=lambda b: -(b.w * b.h))
    if current is not None:
        result.markers.append(Marker("now", x(now), y(now), "now"))
    if as_of is not None or valid_at is not None or known_at is not None:
        result.markers.append(Marker("asof", x(valid_at or now), y(known_at or now), "as of"))
    result.summary = (
        f"{len(records)} version{'s' if len(records) != 1 else ''} from "
        f"{wording.people_datetime(first, zone)} to {wording.people_datetime(last, zone)}"
    )
    return result
