"""Tombstones: content-free marks that hide deleted content and refuse to let it come back.

Every write path calls one of the `refuse_*` checks inside its own transaction; a refusal raises
Tombstoned (HTTP 410) and is logged as a RefusedWrite once the transaction has rolled back. The memory and
derived layers know nothing of deletion: DeletionConfig.ready() registers these checks as their write
guards (`memory.hooks`, `derived.hooks`), and `refusals_logged` as the scope around every guarded write.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q

from deletion import ledger
from deletion.models import DeletionRequest, RefusedWrite, Tombstone
from memory_admin.derived.models import Event
from memory_admin.lib import rows
from memory_admin.memory import stats
from memory_admin.memory.errors import DomainError, Tombstoned
from memory_admin.memory.hooks import FactWrite
from memory_admin.memory.models import MemoryRecord, RecordHide


def keyed(*parts: Any) -> str:
    """A keyed hash (HMAC-SHA256 with the deployment's secret): it matches, but cannot be reversed
    by guessing low-entropy identifiers without the key."""
    mac = _keyed_with(settings.SECRET_KEY).copy()  # the key's pads computed once, not per hash
    mac.update("\x1f".join(str(p) for p in parts).encode())
    return mac.hexdigest()


@functools.cache
def _keyed_with(secret: str) -> hmac.HMAC:
    return hmac.new(secret.encode(), digestmod=hashlib.sha256)


def fact_scope(tenant_id: int, project: str, subject: str, predicate: str) -> str:
    return keyed("fact", tenant_id, project, subject, predicate)


def subject_scope(tenant_id: int, project: str, subject: str) -> str:
    return keyed("subject", tenant_id, project, subject)


def predicate_scope(tenant_id: int, project: str, predicate: str) -> str:
    return keyed("predicate", tenant_id, project, predicate)


def value_digest(value: Any) -> str:
    return keyed("value", json.dumps(value, sort_keys=True, ensure_ascii=False))


def source_digest(ref: str, revision: str) -> str:
    return keyed("source", ref, revision)


def canonical_value(value: Any) -> Any:
    """`value` in the one spelling of every way of writing the same value: each string NFKC-normalised, case
    folded, stripped and with its runs of white space as one space (keys of objects too), and whole floats as
    integers. "Hanako@Example.com ", "hanako@example.com" and its full-width form are one value."""
    if isinstance(value, str):
        folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())
        return " ".join(folded.split())
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [canonical_value(v) for v in value]
    if isinstance(value, dict):
        return {canonical_value(k): canonical_value(v) for k, v in value.items()}
    return value


def subject_value_digest(tenant_id: int, project: str, subject: str, value: Any) -> str | None:
    """The keyed hash a subject deletion keeps each deleted value of the subject out by, under any predicate and in
    any spelling of the same value (`canonical_value`). None for what carries no content of its own (booleans,
    null, an empty string): a subject's `true` must not refuse every later `true` about it."""
    canonical = canonical_value(value)
    if canonical is None or isinstance(canonical, bool) or canonical == "":
        return None
    spelled = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return keyed("subject-value", tenant_id, project, subject, spelled)


# kind, memory_id, scope_hash, value_hash, source_hash, subject_value_hash
StoneRow = tuple[str, str, str, str, str, str | None]
# The record fields a tombstone is made of (a record, a deletion's ScopeRecord, or a named row of these).
STONE_FIELDS = ("memory_id", "subject_id", "predicate", "value", "source_canonical_ref", "source_revision")


def record_rows(
    tenant_id: int, project_key: str, records: Iterable[Any], *, subject_wide: bool = False
) -> list[StoneRow]:
    """The tombstone of each record (its fact key, value and source, as keyed hashes; no model instance). The
    fact key's and the source's hashes are computed once each, however many revisions share them. `subject_wide`
    (a subject's deletion) adds the hash that keeps the value out of the subject under any predicate."""
    facts: dict[tuple[str, str], str] = {}
    sources: dict[tuple[str, str], str] = {}
    rows: list[StoneRow] = []
    for r in records:
        fact = facts.get((r.subject_id, r.predicate))
        if fact is None:  # one per fact key, whatever its revisions
            fact = facts[r.subject_id, r.predicate] = fact_scope(tenant_id, project_key, r.subject_id, r.predicate)
        source = sources.get((r.source_canonical_ref, r.source_revision))
        if source is None:
            source = sources[r.source_canonical_ref, r.source_revision] = source_digest(
                r.source_canonical_ref, r.source_revision
            )
        subject_value = subject_value_digest(tenant_id, project_key, r.subject_id, r.value) if subject_wide else None
        rows.append((Tombstone.Kind.RECORD, r.memory_id, fact, value_digest(r.value), source, subject_value))
    return rows


def insert_for_request(
    request: DeletionRequest, project_key: str, records: Iterable[Any], created_at: datetime, *, scope_hash: str = ""
) -> list[dict[str, Any]]:
    """The request's tombstones in one INSERT ... SELECT over a JSON array of the hashes: one per record given
    (its fact key, value and source), and one for the scope itself when `scope_hash` is given (a subject or a
    predicate). The keyed hashes are computed here, so the key never reaches the database. Answers the ledger's
    entries (content-free).

    A subject's or a predicate's records get theirs when their purge starts (`deletion.stores.records.mark_hidden`),
    not at acceptance: until then the rule that hides them (memory.RecordHide) stands for them, and the refusals
    read the hidden rows as these tombstones (`pending_record_stones`)."""
    by_subject = request.scope_kind == DeletionRequest.ScopeKind.SUBJECT
    rows = record_rows(request.tenant_id, project_key, records, subject_wide=by_subject)
    if scope_hash:
        kind = Tombstone.Kind.SUBJECT if by_subject else Tombstone.Kind.PREDICATE
        rows.append((kind, "", scope_hash, "", "", None))
    if rows:
        _insert_rows(request.tenant_id, request.pk, request.public_id, rows, created_at)
    return [
        ledger.entry_of(
            tenant_id=request.tenant_id,
            kind=kind,
            memory_id=memory_id,
            scope_hash=fact,
            value_hash=value_hash,
            source_hash=source,
            subject_value_hash=subject_value,
            request_public_id=request.public_id,
            created_at=created_at,
        )
        for kind, memory_id, fact, value_hash, source, subject_value in rows
    ]


def _insert_rows(
    tenant_id: int, request_pk: int | None, request_public_id: str, rows: list[StoneRow], now: datetime
) -> None:
    """One statement whatever the number of rows: the rows travel as one JSON parameter (not 10,000 x 12
    bound values) and are expanded by the database (json_array_elements on PostgreSQL, json_each on SQLite)."""
    q = connection.ops.quote_name
    if connection.vendor == "postgresql":
        source, item = "json_array_elements(%s::json) AS j(e)", "j.e->>{}"
    else:
        source, item = "json_each(%s) AS j", "json_extract(j.value, '$[{}]')"
    sql = (
        f"INSERT INTO {q(Tombstone._meta.db_table)} "
        f"({q('tenant_id')}, {q('request_id')}, {q('request_public_id')}, {q('kind')}, {q('memory_id')}, "
        f"{q('scope_hash')}, {q('value_hash')}, {q('source_hash')}, {q('subject_value_hash')}, {q('created_at')}, "
        f"{q('lift_reason')}) SELECT %s, %s, %s, {', '.join(item.format(i) for i in range(6))}, %s, '' FROM {source}"
    )
    created = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant_id, request_pk, request_public_id, created, json.dumps(rows)])


def live() -> Any:
    return Tombstone.objects.filter(lifted_at__isnull=True)


def pending_record_stones(
    tenant_id: int,
    *,
    memory_ids: Iterable[str] = (),
    facts: Iterable[tuple[str, str, str]] = (),
    subjects: Iterable[tuple[str, str]] = (),
    rules_exist: bool | None = None,
) -> list[Tombstone]:
    """The records of `memory_ids` or of `facts` (project key, subject, predicate) that a deletion's rule hides
    until their purge writes their tombstones (memory.RecordHide), as those tombstones will read: unsaved rows
    (`pending_purge`, never saved) with the record's hashes, and the id, request and date of the request's scope
    tombstone, which a refusal names. So a write of deleted content is refused the same way before the purge as
    after it. One probe of the rule table, and no more while the tenant has no rule (`rules_exist` False: the
    caller has probed already). A subject's rule whose subject (project key, subject) is in `subjects` gives all its
    records: their values stay out of the subject under any predicate."""
    ids = {m for m in memory_ids if m}
    keys = set(facts)
    whole_subjects = set(subjects)
    if rules_exist is False or not (ids or keys or whole_subjects):
        return []
    rules = list(RecordHide.objects.filter(tenant_id=tenant_id).select_related("project").order_by("id"))
    if not rules:
        return []
    scope_stones = {
        s.request_public_id: s
        for s in live()
        .filter(
            tenant_id=tenant_id,
            kind__in=(Tombstone.Kind.SUBJECT, Tombstone.Kind.PREDICATE),
            request_public_id__in={r.hidden_by for r in rules},
        )
        .select_related("request__project")
    }
    wanted = Q(memory_id__in=ids) if ids else Q(pk__in=[])
    for project_key, subject_id, predicate in keys:
        wanted |= Q(project__key=project_key, subject_id=subject_id, predicate=predicate)
    stones: list[Tombstone] = []
    for rule in rules:
        scope_stone = scope_stones.get(rule.hidden_by)
        if scope_stone is None:  # lifted: its records were marked and given their own tombstones then
            continue
        covered = rule.covered()  # in any state: a write to the fact may have settled them (`_settle`)
        if not (rule.subject_id and (rule.project.key, rule.subject_id) in whole_subjects):
            covered = covered.filter(wanted)
        records = covered.order_by("id").values_list(*STONE_FIELDS, named=True)
        for stone in unsaved(
            record_rows(tenant_id, rule.project.key, records, subject_wide=bool(rule.subject_id)),
            pk=scope_stone.pk,
            tenant_id=tenant_id,
            request=scope_stone.request,
            request_public_id=scope_stone.request_public_id,
            created_at=rule.created_at,
        ):
            stone.pending_purge = True  # type: ignore[attr-defined]
            stones.append(stone)
    return stones


def unsaved(rows: Iterable[StoneRow], **common: Any) -> list[Tombstone]:
    """`rows` as Tombstone instances, not saved, each with the fields `common` gives."""
    return [
        Tombstone(
            kind=kind,
            memory_id=memory_id,
            scope_hash=fact,
            value_hash=value,
            source_hash=source,
            subject_value_hash=subject_value,
            **common,
        )
        for kind, memory_id, fact, value, source, subject_value in rows
    ]


def record_stones(tenant_id: int, memory_ids: Iterable[str]) -> dict[str, Tombstone]:
    """The live tombstone of each of `memory_ids` that has one (the oldest), written or pending its purge. The
    written ones and the probe of the rules in one round trip: a cached answer's check asks this on every hit."""
    ids = sorted({m for m in memory_ids if m})
    if not ids:
        return {}
    q = connection.ops.quote_name
    written, rules_exist = _live_stones_probing_rules(
        tenant_id,
        f"s.{q('kind')} = %s AND s.{q('memory_id')} IN ({', '.join(['%s'] * len(ids))})",
        [Tombstone.Kind.RECORD.value, *ids],
    )
    found: dict[str, Tombstone] = {}
    for stone in written:
        found.setdefault(stone.memory_id, stone)
    pending = pending_record_stones(tenant_id, memory_ids=set(ids) - found.keys(), rules_exist=rules_exist)
    for stone in pending:
        found.setdefault(stone.memory_id, stone)
    return found


def deleted_record_count(tenant_id: int) -> int:
    """How many records are under a live tombstone: written, or pending the purge of records a rule hides."""
    written: int = live().filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD).count()
    # Rule by rule, on the index of a subject's (or predicate's) records, rather than the rule tested on every
    # record of the tenant. A rule lives only until its purge starts, seconds after its acceptance.
    return written + sum(rule.covered().count() for rule in RecordHide.objects.filter(tenant_id=tenant_id))


def tombstoned_memory_ids(tenant_id: int, memory_ids: Iterable[str]) -> set[str]:
    return set(record_stones(tenant_id, memory_ids))


@contextmanager
def refusals_logged(path: str, actor: str) -> Iterator[None]:
    """Wrap a write's transaction: a Tombstoned refusal is written to the log after the rollback."""
    try:
        yield
    except Tombstoned as exc:
        stone_id = exc.extra.pop("_tombstone_id", None)
        if stone_id is not None:
            # The write's own transaction has rolled back by now; this row is committed on its own
            # (or with the caller's transaction, when a caller wraps this in one).
            stone = Tombstone.objects.get(pk=stone_id)
            RefusedWrite.objects.create(
                tenant_id=stone.tenant_id, tombstone=stone, path=path, actor=actor, why=exc.detail
            )
        raise


def _refusal(stone: Tombstone, why: str) -> Tombstoned:
    return Tombstoned(f"Refused: {why} (deletion {stone.request_public_id}).", _tombstone_id=stone.pk)


def _refuse(stone: Tombstone, why: str) -> None:
    raise _refusal(stone, why)


def refuse_derived_from(tenant_id: int, memory_ids: Iterable[str], what: str) -> None:
    """A write derived from a deleted item."""
    stones = record_stones(tenant_id, memory_ids)
    if stones:
        stone = min(stones.values(), key=lambda s: s.pk)
        _refuse(stone, f"{what} is derived from deleted memory {stone.memory_id}")


def _checked(writes: Sequence[FactWrite]) -> tuple[dict[int, Tombstoned], list[Tombstone]]:
    """Which of `writes` would bring deleted content back, by index: derived from a deleted item, re-asserting a
    deleted value of the fact, coming from the very source revision that was deleted, or extracted from
    redacted log lines. A new value from a new source is accepted. One query per kind of check for all the
    writes (memory.batch guards a thousand at once; `guard_assertion` one). Also answers the pending tombstones
    (records a rule hides) of the facts the accepted writes are about, for `_settle`."""
    refusals: dict[int, Tombstoned] = {}
    hidden: list[Tombstone] = []
    by_tenant: dict[int, list[int]] = {}
    for i, write in enumerate(writes):
        by_tenant.setdefault(write.tenant_id, []).append(i)
    for tenant_id, indexes in by_tenant.items():
        hidden += _refusals_of_tenant(tenant_id, [(i, writes[i]) for i in indexes], refusals)
    return refusals, hidden


def _refusals_of_tenant(
    tenant_id: int, writes: list[tuple[int, FactWrite]], refusals: dict[int, Tombstoned]
) -> list[Tombstone]:
    derived = {i: [d.get("memory_id", "") for d in w.derived_from if d.get("memory_id")] for i, w in writes}
    wanted = {m for ids in derived.values() for m in ids}
    by_memory_id: dict[str, Tombstone] = {}
    if wanted:
        for stone in (
            live().filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, memory_id__in=wanted).order_by("pk")
        ):
            by_memory_id.setdefault(stone.memory_id, stone)
    scopes = {i: fact_scope(tenant_id, w.project_id, w.subject_id, w.predicate) for i, w in writes}
    subjects = {i: subject_scope(tenant_id, w.project_id, w.subject_id) for i, w in writes}
    subject_values = {i: subject_value_digest(tenant_id, w.project_id, w.subject_id, w.value) for i, w in writes}
    by_scope: dict[str, list[Tombstone]] = {}
    by_subject_value: dict[str, list[Tombstone]] = {}
    written, rules_exist = _live_stones_of_scopes(
        tenant_id, set(scopes.values()) | set(subjects.values()), {v for v in subject_values.values() if v}
    )
    # The records a rule hides until their purge count as tombstoned: their tombstones, pending, join the written
    # (a subject's rule gives all the subject's records, for the values that stay out of it under any predicate).
    pending = pending_record_stones(
        tenant_id,
        memory_ids=wanted - by_memory_id.keys(),
        facts={(w.project_id, w.subject_id, w.predicate) for _, w in writes},
        subjects={(w.project_id, w.subject_id) for _, w in writes},
        rules_exist=rules_exist,
    )
    for stone in written + pending:
        by_scope.setdefault(stone.scope_hash, []).append(stone)
        if stone.subject_value_hash:
            by_subject_value.setdefault(stone.subject_value_hash, []).append(stone)
    for stone in pending:
        if stone.memory_id in wanted:
            by_memory_id.setdefault(stone.memory_id, stone)
    cited = {e for _, w in writes for e in w.event_ids if e}
    removed_events: set[str] = set()
    if cited:
        removed_events = set(
            Event.objects.filter(tenant_id=tenant_id, public_id__in=cited).removed().values_list("public_id", flat=True)
        )
    latest = live().filter(tenant_id=tenant_id).order_by("-id").first() if removed_events else None
    for i, w in writes:
        deleted_bases = [by_memory_id[m] for m in derived[i] if m in by_memory_id]
        if deleted_bases:
            stone = min(deleted_bases, key=lambda s: s.pk)
            refusals[i] = _refusal(stone, f"This fact is derived from deleted memory {stone.memory_id}")
            continue
        refusal = _fact_refusal(w, by_scope.get(scopes[i], []))
        subject_value = subject_values[i]
        if refusal is None and subject_value is not None and subject_value in by_subject_value:
            stone = by_subject_value[subject_value][0]
            refusal = _refusal(stone, "this value was deleted with its subject, under whatever field it is written")
        if refusal is None and w.valid_from is not None:
            deleted = [s for s in by_scope.get(subjects[i], []) if s.kind == Tombstone.Kind.SUBJECT]
            latest_deletion = max(deleted, key=lambda s: s.created_at, default=None)
            if latest_deletion is not None and w.valid_from < latest_deletion.created_at:
                stone = latest_deletion
                refusal = _refusal(
                    stone,
                    "this fact about a deleted subject is valid from before the subject's deletion; "
                    "a new fact about it must be valid from a later time",
                )
        if refusal is not None:
            refusals[i] = refusal
            continue
        if latest is not None and any(e in removed_events for e in w.event_ids):
            refusals[i] = _refusal(latest, "it is extracted from log lines a deletion removed")
    accepted = {scopes[i] for i, _ in writes if i not in refusals}
    return [s for s in pending if s.scope_hash in accepted]


def _fact_refusal(w: FactWrite, stones: list[Tombstone]) -> Tombstoned | None:
    """A write re-asserting a deleted value of its fact, or coming from the very source revision deleted."""
    if not stones:
        return None
    value_hash, source_hash = value_digest(w.value), source_digest(w.source_canonical_ref, w.source_revision)
    for stone in stones:
        if stone.kind != Tombstone.Kind.RECORD:
            continue
        if stone.value_hash == value_hash:
            return _refusal(stone, "this value of the fact was deleted")
        if stone.source_hash == source_hash:
            return _refusal(stone, "this source revision predates the deletion of the fact")
    return None


def _live_stones_of_scopes(
    tenant_id: int, scopes: set[str], subject_values: set[str]
) -> tuple[list[Tombstone], bool | None]:
    """The live tombstones of `scopes` or of `subject_values`, oldest first, and whether the tenant has a record
    hiding rule (None: not probed). One write (every single write asks this) is one statement, with the probe in
    the same round trip; a batch's many, the queryset."""
    if len(scopes) > 2 or len(subject_values) > 1:
        wanted = Q(scope_hash__in=scopes) | Q(subject_value_hash__in=subject_values)
        return list(live().filter(wanted, tenant_id=tenant_id).order_by("pk")), None
    q = connection.ops.quote_name
    where = f"s.{q('scope_hash')} IN ({', '.join(['%s'] * len(scopes))})"
    if subject_values:
        where = f"({where} OR s.{q('subject_value_hash')} = %s)"
    return _live_stones_probing_rules(tenant_id, where, [*sorted(scopes), *subject_values])


def _live_stones_probing_rules(tenant_id: int, where: str, params: list[Any]) -> tuple[list[Tombstone], bool]:
    """The tenant's live tombstones matching `where` (on the alias `s`), oldest first, and whether the tenant has a
    record hiding rule (memory.RecordHide), in one round trip: the stones are LEFT JOINed to one row, so the probe
    answers when no stone matches. The statement's frame is built once (lib.rows), not a queryset per call."""
    with connection.cursor() as cursor:
        cursor.execute(_probing_sql().format(where=where), [tenant_id, tenant_id, *params])
        found = cursor.fetchall()
    return [rows.load(Tombstone, row[1:]) for row in found if row[1] is not None], bool(found[0][0])


@functools.cache
def _probing_sql() -> str:
    q = connection.ops.quote_name
    return (
        f"SELECT EXISTS (SELECT 1 FROM {q(RecordHide._meta.db_table)} h WHERE h.{q('tenant_id')} = %s), "
        f"{rows.select_list(Tombstone, 's')} FROM (SELECT 1 AS one) AS one "
        f"LEFT JOIN {q(Tombstone._meta.db_table)} s ON s.{q('lifted_at')} IS NULL "
        f"AND s.{q('tenant_id')} = %s AND {{where}} "
        f"ORDER BY s.{q('id')}"
    )


def guard_assertion(write: FactWrite) -> None:
    """Memory's assertion guard (registered in DeletionConfig.ready): the refusals (`_checked`) of what the
    assertion is about to write, inside its transaction with the fact locked; if accepted, the fact's records a
    rule hides are settled first (`_settle`)."""
    refusals, hidden = _checked([write])
    if 0 in refusals:
        raise refusals[0]
    _settle(write.tenant_id, hidden)


def guard_assertions(writes: Sequence[FactWrite]) -> dict[int, DomainError]:
    """The set form of `guard_assertion` for memory.batch (registered as its batch form): refusals by index."""
    refusals, hidden = _checked(writes)
    for tenant_id in {w.tenant_id for w in writes}:
        _settle(tenant_id, [s for s in hidden if s.tenant_id == tenant_id])
    return dict(refusals)


def _settle(tenant_id: int, hidden: list[Tombstone]) -> None:
    """Mark the records of a fact about to be written that a deletion's rule hides (memory.RecordHide), as the
    purge will mark them (counted as deleted already): the write then finds the fact without them, as after the
    purge, instead of finding a deleted record as its current one (and a head the new one may not join). They stay
    covered by the rule, so their pending tombstones still refuse their content until the purge writes them."""
    by_moment: dict[datetime, set[str]] = {}
    for stone in hidden:
        by_moment.setdefault(stone.created_at, set()).add(stone.memory_id)
    for moment, memory_ids in by_moment.items():
        stats.update_uncounted(
            MemoryRecord.all_objects.filter(tenant_id=tenant_id, memory_id__in=memory_ids, tombstoned_at__isnull=True),
            tombstoned_at=moment,
            status=MemoryRecord.Status.DELETED,
            is_head=False,
        )


def refuse_event(tenant_id: int, project: str, subject_ids: Iterable[str], occurred_at: Any) -> None:
    """A log line about a deleted subject that happened before the deletion: a rebuild from old logs."""
    scopes = [subject_scope(tenant_id, project, s) for s in subject_ids]
    if not scopes:
        return
    stone = (
        live()
        .filter(tenant_id=tenant_id, kind=Tombstone.Kind.SUBJECT, scope_hash__in=scopes, created_at__gt=occurred_at)
        .first()
    )
    if stone is not None:
        _refuse(stone, "a log line about a deleted subject from before its deletion")
