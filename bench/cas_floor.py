"""The floor of a CAS write (issue 16 part 4): the statements one `assert_fact` supersession sends, run as raw SQL.

1. Capture: two real supersessions through `assert_fact` (on two fact keys, untimed) are recorded statement by
   statement (`connection.execute_wrapper`: the SQL with its parameters, whether it ran inside the write's
   transaction, and its result rows); `CaptureQueriesContext` counts the round trips, BEGIN and COMMIT included.
2. Template: the two captures are compared parameter by parameter. A value equal in both is a constant; one that
   differs is named by what it is in both writes: an attribute of the fact key or of the new version (ids, key,
   revisions, value, lock key), a value an earlier statement returned (the new row's id), the clock (every
   timestamp becomes the replay's `now`), or text holding those (memory ids in a reason). Anything else keeps the
   first capture's value (counted in the note: its cost is the same).
3. Replay: for other fact keys (so the rows really change), the same statements are sent through the psycopg
   connection itself — no ORM, no decision logic — those of the transaction in one transaction per write, the
   others (the policy read) before it, as assert_fact does.

The floor is what this design costs the database and the driver; `assert_fact`'s rate over it is the share left
to Python. bench/run.py prints both rates and the ratio, in one process and in `--processes` processes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FLOOR_PREFIX = "floor"


@dataclass(frozen=True)
class FloorHead:
    """A fact key's head with what the floor needs of it (bench.measure.Head lacks the row's ids)."""

    pk: int
    memory_id: str
    project_pk: int
    project: str
    subject_id: str
    predicate: str
    revision: int
    source_ref: str
    source_revision: str


def sample_floor_heads(tenant_id: int, n: int, seed: int) -> list[FloorHead]:
    """n distinct random fact keys of the tenant with their current, accepted head."""
    from django.db import connection

    from memory_admin.lib import sealing

    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(%s)", [(seed % 1000) / 1000])
        cursor.execute(
            """
            SELECT r.id, r.memory_id, p.id, p.key, r.subject_id, r.predicate, r.revision,
                   r.source_canonical_ref, r.source_revision
            FROM memory_memoryrecord r JOIN memory_project p ON p.id = r.project_id
            WHERE r.tenant_id = %s AND r.is_head AND r.status = 'accepted' AND r.tombstoned_at IS NULL
              AND r.valid_to IS NULL AND r.source_revision ~ '^r[0-9]+$'
            ORDER BY random() LIMIT %s
            """,
            [tenant_id, n],
        )
        rows = cursor.fetchall()
    # The ref is stored sealed (lib.sealing): opened, as the model field's reads do.
    return [
        FloorHead(pk, memory_id, project_pk, project, subject, predicate, revision, sealing.open_text(ref, _REF), rev)
        for pk, memory_id, project_pk, project, subject, predicate, revision, ref, rev in rows
    ]


_REF = "record.source_ref"


def _next_source_revision(head: FloorHead) -> str:
    return f"r{int(head.source_revision.lstrip('r')) + 1}"


# --- 1. Capture ----------------------------------------------------------------------------------


@dataclass
class Statement:
    sql: str
    params: Any
    in_transaction: bool
    rows: list[tuple[Any, ...]] | None


@dataclass
class Capture:
    statements: list[Statement]
    attrs: dict[str, Any]  # what the write is about (see _attrs)
    round_trips: int  # CaptureQueriesContext: every query sent, BEGIN and COMMIT included
    outcome: str


def _attrs(tenant_id: int, head: FloorHead, new_memory_id: str, value: str) -> dict[str, Any]:
    """The values of one supersession that a replay on another key must change, by name (searched in order)."""
    from memory_admin.memory.actions import fact_lock_key

    return {
        "old_pk": head.pk,
        "old_memory_id": head.memory_id,
        "new_memory_id": new_memory_id,
        "project_pk": head.project_pk,
        "project": head.project,
        "subject_id": head.subject_id,
        "predicate": head.predicate,
        "old_revision": head.revision,
        "new_revision": head.revision + 1,
        "source_ref": head.source_ref,
        "old_source_revision": head.source_revision,
        "new_source_revision": _next_source_revision(head),
        "value": value,
        "lock_key": fact_lock_key(tenant_id, head.project, head.subject_id, head.predicate),
    }


def capture_write(principal: Any, head: FloorHead, value: str) -> Capture:
    """One real supersession of `head` through assert_fact, statement by statement."""
    from django.db import connection
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from memory_admin.memory.actions import Assertion, assert_fact

    statements: list[Statement] = []

    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if many:
            raise RuntimeError("executemany in a CAS write: the floor does not replay it")
        result = execute(sql, params, many, context)
        raw = context["cursor"].cursor
        rows = None
        if raw.description is not None:
            rows = raw.fetchall()
            if rows:
                raw.scroll(0, mode="absolute")  # the caller reads the rows as if nothing happened
        statements.append(Statement(sql, params, connection.in_atomic_block, rows))
        return result

    assertion = Assertion(
        project_id=head.project,
        subject_id=head.subject_id,
        predicate=head.predicate,
        value=value,
        valid_from=timezone.now(),
        source_canonical_ref=head.source_ref,
        source_revision=_next_source_revision(head),
        expected_revision=head.revision,
    )
    # Captured with sealing off (lib.sealing): the floor is the write's SQL, whose parameters it fills in again for
    # another fact; a sealed value is an envelope under another fact's key that no fill can rewrite. What sealing
    # adds to a write is measured by bench/sealing.py (make bench-sealing).
    with (
        override_settings(SEALING_ENABLED=False),
        CaptureQueriesContext(connection) as queries,
        connection.execute_wrapper(record),
    ):
        result = assert_fact(principal, assertion)
    attrs = _attrs(int(principal.tenant_id), head, result.record.memory_id, value)
    return Capture(statements, attrs, len(queries.captured_queries), result.outcome.value)


# --- 2. Template ---------------------------------------------------------------------------------

Filler = Callable[["_Fill"], Any]


@dataclass
class _Fill:
    """What one replay fills the template with."""

    attrs: dict[str, Any]
    now: datetime
    results: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    # (first capture's text, the replay's text), longest first
    texts: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Plan:
    statements: list[tuple[str, Filler, bool]]  # (sql, parameters, in the transaction)
    round_trips: int
    kept: int  # parameters that differ between the captures but are named by nothing: the first one's value
    described: list[str]  # one line per statement, for the report

    @property
    def queries(self) -> int:
        return len(self.statements)


class TemplateError(RuntimeError):
    pass


def build_plan(a: Capture, b: Capture) -> Plan:
    """Compare two captures of the same path and make the replay template (see the module docstring)."""
    if [_path(s.sql) for s in a.statements] != [_path(s.sql) for s in b.statements] or a.outcome != b.outcome:
        raise TemplateError("The two captured writes took different paths; no template.")
    kept = 0
    text_attrs = [k for k, v in a.attrs.items() if isinstance(v, str) and len(v) >= 3]

    def named(va: Any, vb: Any, before: int) -> Filler | None:
        # The parameter keeps its own type (psycopg's Int4 wraps a revision, say); bools are never names.
        cast = type(va)
        if isinstance(va, bool):
            return None
        for name, value in a.attrs.items():
            if isinstance(va, type(value)) and value == va and b.attrs[name] == vb:
                return lambda f: cast(f.attrs[name])
        for i in range(before):
            rows_a, rows_b = a.statements[i].rows or [], b.statements[i].rows or []
            for r, (row_a, row_b) in enumerate(zip(rows_a, rows_b, strict=False)):
                for c, (ra, rb) in enumerate(zip(row_a, row_b, strict=False)):
                    if not isinstance(ra, bool) and isinstance(va, type(ra)) and ra == va and rb == vb:
                        return lambda f: cast(f.results[i][r][c])
        return None

    def leaf(va: Any, vb: Any, before: int) -> Filler:
        nonlocal kept
        if type(va) is not type(vb):
            raise TemplateError(f"A parameter changed type between the captures: {va!r} / {vb!r}")
        if va == vb:
            return lambda f: va
        if isinstance(va, datetime):
            return lambda f: f.now
        if (by_name := named(va, vb, before)) is not None:
            return by_name
        if isinstance(va, str) and any(a.attrs[k] in va for k in text_attrs):

            def substituted(f: _Fill, text: str = va) -> str:
                for old, new in f.texts:
                    text = text.replace(old, new)
                return text

            return substituted
        kept += 1
        return lambda f: va

    def tree(va: Any, vb: Any, before: int) -> Filler:
        from psycopg.types.json import Jsonb

        if isinstance(va, Jsonb) and isinstance(vb, Jsonb):
            inner = tree(va.obj, vb.obj, before)
            return lambda f: Jsonb(inner(f), dumps=va.dumps)
        if isinstance(va, list | tuple) and isinstance(vb, list | tuple):
            if len(va) != len(vb):
                raise TemplateError("A parameter list changed length between the captures.")
            items = [tree(x, y, before) for x, y in zip(va, vb, strict=True)]
            return lambda f: type(va)(item(f) for item in items)
        if isinstance(va, dict) and isinstance(vb, dict):
            if va.keys() != vb.keys():
                raise TemplateError("A JSON parameter changed shape between the captures.")
            values = {k: tree(va[k], vb[k], before) for k in va}
            return lambda f: {k: value(f) for k, value in values.items()}
        return leaf(va, vb, before)

    statements = []
    for i, (sa, sb) in enumerate(zip(a.statements, b.statements, strict=True)):
        params = tree(sa.params, sb.params, i) if sa.params is not None else (lambda f: None)
        statements.append((sa.sql, params, sa.in_transaction))
    described = [_describe(s) for s in a.statements]
    return Plan(statements, a.round_trips, kept, described)


def _path(sql: str) -> str:
    # Savepoint names (an assert_fact inside an outer transaction, as in tests) differ per write.
    return re.sub(r'SAVEPOINT "[^"]+"', "SAVEPOINT", sql)


def _describe(statement: Statement) -> str:
    words = " ".join(statement.sql.split())
    return ("  " if statement.in_transaction else "* ") + (words[:110] + ("…" if len(words) > 110 else ""))


# --- 3. Replay -----------------------------------------------------------------------------------


def _fill_for(tenant_id: int, plan_attrs: dict[str, Any], head: FloorHead, value: str) -> _Fill:
    from django.utils import timezone

    from memory_admin.memory.models import new_public_id

    attrs = _attrs(tenant_id, head, new_public_id("mem"), value)
    texts = sorted(
        ((plan_attrs[k], attrs[k]) for k, v in plan_attrs.items() if isinstance(v, str) and len(v) >= 3),
        key=lambda pair: -len(pair[0]),
    )
    return _Fill(attrs=attrs, now=timezone.now(), texts=texts)


def replay_write(plan: Plan, fill: _Fill) -> None:
    """The plan's statements for one write, through the psycopg connection: those captured inside the
    transaction in one transaction, the others before or after it, as they were sent."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection  # psycopg, in autocommit mode between Django's transactions
    flags = [in_transaction for _, _, in_transaction in plan.statements]
    first = flags.index(True) if True in flags else len(flags)
    last = len(flags) - flags[::-1].index(True) if True in flags else len(flags)
    if not all(flags[first:last]):
        raise TemplateError("The captured transaction is not one run of statements.")
    with raw.cursor() as cursor:

        def run(i: int) -> None:
            sql, params, _ = plan.statements[i]
            cursor.execute(sql, params(fill))
            if cursor.description is not None:
                fill.results[i] = cursor.fetchall()

        for i in range(first):
            run(i)
        with raw.transaction():
            for i in range(first, last):
                run(i)
        for i in range(last, len(flags)):
            run(i)


@dataclass
class FloorRun:
    samples_ms: list[float]
    started: float
    finished: float
    cpu_s: float  # this process's CPU time over the timed writes (psycopg's, the server's is not counted)
    errors: dict[str, int]


def floor_writes(
    plan: Plan,
    plan_attrs: dict[str, Any],
    tenant_id: int,
    heads: list[FloorHead],
    warmup: int,
    tag: str,
    ready: Callable[[], object] | None = None,
) -> FloorRun:
    """Replay the plan on each head (the first `warmup` untimed), like bench.run.cas_writes."""
    errors: dict[str, int] = {}
    samples: list[float] = []

    def write(i: int, head: FloorHead) -> None:
        fill = _fill_for(tenant_id, plan_attrs, head, f"{FLOOR_PREFIX}-{tag}-{i}")
        try:
            replay_write(plan, fill)
        except Exception as exc:  # reported, never hidden
            key = f"{type(exc).__name__}: {str(exc)[:160]}"
            errors[key] = errors.get(key, 0) + 1

    for i, head in enumerate(heads[:warmup]):
        write(i, head)
    if ready is not None:
        ready()
    started, cpu = time.perf_counter(), time.process_time()
    for i, head in enumerate(heads[warmup:], start=warmup):
        t0 = time.perf_counter()
        write(i, head)
        samples.append((time.perf_counter() - t0) * 1000)
    return FloorRun(samples, started, time.perf_counter(), time.process_time() - cpu, errors)


def make_plan(principal: Any, candidates: list[FloorHead], tag: str) -> tuple[Plan, dict[str, Any], list[FloorHead]]:
    """Capture two supersessions and build the replay plan from them; also returns the two heads used.

    The two fact keys differ in every attribute (project, subject, predicate, revisions), so a parameter equal in
    both captures is a constant, never a coincidence; and no two attributes are equal in both (`_ambiguous`), so
    a parameter names one attribute only."""
    pairs = ((a, b) for i, a in enumerate(candidates) for b in candidates[i + 1 :])
    chosen = next(
        (
            (a, b)
            for a, b in pairs
            if a.project != b.project
            and a.subject_id != b.subject_id
            and a.predicate != b.predicate
            and a.revision != b.revision
            and not _ambiguous(a, b)
        ),
        None,
    )
    if chosen is None:
        raise TemplateError("No two sampled fact keys differ in every attribute; sample more.")
    first, second = chosen
    _remember_projects(principal, [first.project, second.project])
    a = capture_write(principal, first, f"{FLOOR_PREFIX}-{tag}-capture-a")
    b = capture_write(principal, second, f"{FLOOR_PREFIX}-{tag}-capture-b")
    if a.outcome != "created":
        raise TemplateError(f"The captured write was {a.outcome}, not a supersession.")
    return build_plan(a, b), a.attrs, [first, second]


def _ambiguous(a: FloorHead, b: FloorHead) -> bool:
    """Whether two attributes of the writes to `a` and `b` are equal in both (say the project's pk and the new
    revision: 3 and 3, then 5 and 5): the template could not tell which one a parameter is, and a replay would
    write one where the other belongs (a revision taken from the project's pk, refused as a duplicate or, worse,
    accepted in the wrong place)."""
    one, two = _attrs(0, a, "mem-a", "value-a"), _attrs(0, b, "mem-b", "value-b")
    names = list(one)
    return any(one[x] == one[y] and two[x] == two[y] for i, x in enumerate(names) for y in names[i + 1 :])


def _remember_projects(principal: Any, keys: list[str]) -> None:
    """Warm assert_fact's per-process project ids, as the timed writes find them (steady state, not first use)."""
    from django.db import transaction

    from memory_admin.memory.actions import project_for

    with transaction.atomic():
        for key in keys:
            project_for(principal.require_tenant, key)


def verify_floor(tenant_id: int, heads: list[FloorHead]) -> str:
    """Each replayed fact key: one accepted head at revision+1, the old head superseded by it."""
    from memory_admin.memory.models import MemoryRecord

    problems = 0
    for head in heads:
        new = MemoryRecord.objects.filter(
            tenant_id=tenant_id,
            project_id=head.project_pk,
            subject_id=head.subject_id,
            predicate=head.predicate,
            revision=head.revision + 1,
        ).first()
        old = MemoryRecord.objects.filter(pk=head.pk).first()
        ok = (
            new is not None
            and old is not None
            and new.is_head
            and new.status == "accepted"
            and not old.is_head
            and old.status == "superseded"
            and old.superseded_by_id == new.pk
        )
        problems += not ok
    return f"{len(heads) - problems}/{len(heads)} sampled replays verified in the database"


# --- The benchmark (called by bench/run.py's writes benchmark) ----------------------------------

CANDIDATES = 30  # fact keys sampled to find the two captured writes (see make_plan)


def _floor_worker(
    candidates: list[FloorHead], heads: list[FloorHead], warmup: int, tag: str, barrier: Any, results: Any
) -> None:
    """One floor process: its own Django and connection, its own captured plan (two more keys), its own keys."""
    from bench.rls import as_app_role
    from bench.setup import bench_principal, setup_django

    setup_django()
    principal = bench_principal()
    as_app_role(int(principal.tenant_id))
    from django.db import connection

    connection.ensure_connection()
    plan, attrs, _ = make_plan(principal, candidates, tag)
    results.put(floor_writes(plan, attrs, int(principal.tenant_id), heads, warmup, tag, ready=barrier.wait))
    connection.close()


def floor_single(
    principal: Any, tenant_id: int, writes: int, warmup: int, seed: int, assert_fact_rate: float
) -> tuple[list[Any], list[str]]:
    """The floor in this process, right after assert_fact's own one-process run (the machine is shared: the
    closer the two runs, the fairer the ratio): writes/s and the ratio assert_fact / floor."""
    from bench.measure import Figure

    heads = sample_floor_heads(tenant_id, CANDIDATES + writes + warmup, seed + 5)
    plan, attrs, used = make_plan(principal, heads[:CANDIDATES], f"{seed}-s")
    rest = heads[CANDIDATES:]
    run = floor_writes(plan, attrs, tenant_id, rest, warmup, f"{seed}-s")
    rate = len(run.samples_ms) / (run.finished - run.started)
    figure = Figure(
        FLOOR_NAME.format(n="1 process"), run.samples_ms, note=_ratio(rate, assert_fact_rate, sum(run.errors.values()))
    )
    notes = [
        f"floor: {plan.round_trips} round trips per write ({plan.queries} statements + BEGIN/COMMIT), captured from "
        f"assert_fact superseding {used[0].project}/{used[0].subject_id}/{used[0].predicate}; {plan.kept} parameters "
        "kept as captured (audit snapshot contents, tombstone scope hash); * = outside the transaction:"
    ]
    notes.extend(f"    {line}" for line in plan.described)
    notes.append(
        f"floor 1 process: client-side CPU (psycopg) {run.cpu_s * 1000 / len(run.samples_ms):.2f} ms per write"
    )
    notes.append(f"floor 1 process: errors {run.errors or 'none'}; " + verify_floor(tenant_id, rest[warmup:][:50]))
    return [figure], notes


def floor_parallel(
    tenant_id: int, per_process: int, processes: int, warmup: int, seed: int, assert_fact_rate: float
) -> tuple[list[Any], list[str]]:
    """The floor in `processes` processes (each captures its own plan), right after assert_fact's parallel run."""
    import multiprocessing

    from django.db import connection

    from bench.measure import Figure, collect_runs

    connection.close()
    heads = sample_floor_heads(tenant_id, (CANDIDATES + per_process + warmup) * processes, seed + 6)
    connection.close()  # children connect on their own; nothing is shared with them
    chunks = [heads[p::processes] for p in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_floor_worker,
            args=(chunk[:CANDIDATES], chunk[CANDIDATES:], warmup, f"{seed}-m{p}", barrier, results),
        )
        for p, chunk in enumerate(chunks)
    ]
    runs: list[FloorRun] = collect_runs(workers, results, "floor")
    wall = max(r.finished for r in runs) - min(r.started for r in runs)
    total = sum(len(r.samples_ms) for r in runs)
    rate = total / wall
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r.errors.items():
            errors[k] = errors.get(k, 0) + v
    figure = Figure(
        FLOOR_NAME.format(n=f"{processes} processes"),
        [s for r in runs for s in r.samples_ms],
        note=_ratio(rate, assert_fact_rate, sum(errors.values())),
    )
    cpu = sum(r.cpu_s for r in runs) * 1000 / total
    replayed = [h for chunk in chunks for h in chunk[CANDIDATES + warmup :]][:50]
    notes = [
        f"floor {processes} processes: client-side CPU (psycopg) {cpu:.2f} ms per write",
        f"floor {processes} processes: errors {errors or 'none'}; " + verify_floor(tenant_id, replayed),
    ]
    return [figure], notes


FLOOR_NAME = "CAS floor (same SQL, raw psycopg), {n}"


def _ratio(floor_rate: float, assert_fact_rate: float, errors: int = 0) -> str:
    ratio = f"{floor_rate:,.0f} writes/s; assert_fact/floor = {assert_fact_rate / floor_rate:.2f} ({assert_fact_rate:,.0f}/s)"
    if errors:  # a failed replay stops early: the floor would look faster than it is
        ratio += f"; NOT A FLOOR: {errors:,} replays failed (see the errors below)"
    return ratio
