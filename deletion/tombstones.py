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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection

from deletion import ledger
from deletion.models import DeletionRequest, RefusedWrite, Tombstone
from memory_admin.derived.models import Event
from memory_admin.memory import rows
from memory_admin.memory.errors import DomainError, Tombstoned
from memory_admin.memory.hooks import FactWrite


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


if TYPE_CHECKING:
    from deletion.stores.base import Scope


def insert_for_request(
    request: DeletionRequest, scope: Scope, now: datetime, *, scope_hash: str = ""
) -> list[dict[str, Any]]:
    """The request's tombstones in one INSERT ... SELECT over a JSON array of the hashes: one per record of
    the scope (its fact key, value and source), and one for the scope itself when `scope_hash` is given
    (a subject or a predicate). No model instance is built; the keyed hashes are computed here, so the key
    never reaches the database. Answers the ledger's entries (content-free)."""
    facts: dict[tuple[str, str], str] = {}
    sources: dict[tuple[str, str], str] = {}
    rows: list[tuple[str, str, str, str, str]] = []
    for r in scope.records:
        fact = facts.get((r.subject_id, r.predicate))
        if fact is None:  # one per fact key, whatever its revisions
            fact = facts[r.subject_id, r.predicate] = fact_scope(
                request.tenant_id, scope.project_key, r.subject_id, r.predicate
            )
        source = sources.get((r.source_canonical_ref, r.source_revision))
        if source is None:
            source = sources[r.source_canonical_ref, r.source_revision] = source_digest(
                r.source_canonical_ref, r.source_revision
            )
        rows.append((Tombstone.Kind.RECORD, r.memory_id, fact, value_digest(r.value), source))
    if scope_hash:
        kind = (
            Tombstone.Kind.SUBJECT
            if request.scope_kind == DeletionRequest.ScopeKind.SUBJECT
            else Tombstone.Kind.PREDICATE
        )
        rows.append((kind, "", scope_hash, "", ""))
    if rows:
        _insert_rows(request, rows, now)
    return [
        ledger.entry_of(
            tenant_id=request.tenant_id,
            kind=kind,
            memory_id=memory_id,
            scope_hash=fact,
            value_hash=value_hash,
            source_hash=source,
            request_public_id=request.public_id,
            created_at=now,
        )
        for kind, memory_id, fact, value_hash, source in rows
    ]


def _insert_rows(request: DeletionRequest, rows: list[tuple[str, str, str, str, str]], now: datetime) -> None:
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
        f"{q('scope_hash')}, {q('value_hash')}, {q('source_hash')}, {q('created_at')}, {q('lift_reason')}) "
        f"SELECT %s, %s, %s, {', '.join(item.format(i) for i in range(5))}, %s, '' FROM {source}"
    )
    created = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(sql, [request.tenant_id, request.pk, request.public_id, created, json.dumps(rows)])


def live() -> Any:
    return Tombstone.objects.filter(lifted_at__isnull=True)


def tombstoned_memory_ids(tenant_id: int, memory_ids: Iterable[str]) -> set[str]:
    ids = [m for m in memory_ids if m]
    if not ids:
        return set()
    return set(
        live()
        .filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, memory_id__in=ids)
        .values_list("memory_id", flat=True)
    )


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
    ids = [m for m in memory_ids if m]
    if not ids:
        return
    stone = live().filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, memory_id__in=ids).first()
    if stone is not None:
        _refuse(stone, f"{what} is derived from deleted memory {stone.memory_id}")


def assertion_refusals(writes: Sequence[FactWrite]) -> dict[int, Tombstoned]:
    """Which of `writes` would bring deleted content back, by index: derived from a deleted item, re-asserting a
    deleted value of the fact, coming from the very source revision that was deleted, or extracted from
    redacted log lines. A new value from a new source is accepted. One query per kind of check for all the
    writes (memory.batch guards a thousand at once; `guard_assertion` one)."""
    refusals: dict[int, Tombstoned] = {}
    by_tenant: dict[int, list[int]] = {}
    for i, write in enumerate(writes):
        by_tenant.setdefault(write.tenant_id, []).append(i)
    for tenant_id, indexes in by_tenant.items():
        _refusals_of_tenant(tenant_id, [(i, writes[i]) for i in indexes], refusals)
    return refusals


def _refusals_of_tenant(tenant_id: int, writes: list[tuple[int, FactWrite]], refusals: dict[int, Tombstoned]) -> None:
    derived = {i: [d.get("memory_id", "") for d in w.derived_from if d.get("memory_id")] for i, w in writes}
    wanted = {m for ids in derived.values() for m in ids}
    record_stones: dict[str, Tombstone] = {}
    if wanted:
        for stone in (
            live().filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, memory_id__in=wanted).order_by("pk")
        ):
            record_stones.setdefault(stone.memory_id, stone)
    scopes = {i: fact_scope(tenant_id, w.project_id, w.subject_id, w.predicate) for i, w in writes}
    fact_stones: dict[str, list[Tombstone]] = {}
    for stone in _live_stones_of_scopes(tenant_id, set(scopes.values())):
        fact_stones.setdefault(stone.scope_hash, []).append(stone)
    cited = {e for _, w in writes for e in w.event_ids if e}
    removed_events: set[str] = set()
    if cited:
        removed_events = set(
            Event.objects.filter(tenant_id=tenant_id, public_id__in=cited).removed().values_list("public_id", flat=True)
        )
    latest = live().filter(tenant_id=tenant_id).order_by("-id").first() if removed_events else None
    for i, w in writes:
        deleted_bases = [record_stones[m] for m in derived[i] if m in record_stones]
        if deleted_bases:
            stone = min(deleted_bases, key=lambda s: s.pk)
            refusals[i] = _refusal(stone, f"This fact is derived from deleted memory {stone.memory_id}")
            continue
        stones = fact_stones.get(scopes[i], [])
        if stones:
            value_hash, source_hash = value_digest(w.value), source_digest(w.source_canonical_ref, w.source_revision)
            refusal = next(
                (
                    _refusal(stone, why)
                    for stone in stones
                    for why, matches in (
                        ("this value of the fact was deleted", stone.value_hash == value_hash),
                        ("this source revision predates the deletion of the fact", stone.source_hash == source_hash),
                    )
                    if matches
                ),
                None,
            )
            if refusal is not None:
                refusals[i] = refusal
                continue
        if latest is not None and any(e in removed_events for e in w.event_ids):
            refusals[i] = _refusal(latest, "it is extracted from log lines a deletion removed")


def _live_stones_of_scopes(tenant_id: int, scopes: set[str]) -> list[Tombstone]:
    """The live tombstones of `scopes`, oldest first. One scope (every single write asks this) is one statement
    built once (memory.rows), not a queryset compiled per write; a batch's many scopes, the queryset."""
    if len(scopes) != 1:
        return list(live().filter(tenant_id=tenant_id, scope_hash__in=scopes).order_by("pk"))
    with connection.cursor() as cursor:
        cursor.execute(_one_scope_sql(), [tenant_id, next(iter(scopes))])
        return [rows.load(Tombstone, row) for row in cursor.fetchall()]


@functools.cache
def _one_scope_sql() -> str:
    q = connection.ops.quote_name
    return (
        f"SELECT {rows.select_list(Tombstone, 's')} FROM {q(Tombstone._meta.db_table)} s "
        f"WHERE s.{q('lifted_at')} IS NULL AND s.{q('tenant_id')} = %s AND s.{q('scope_hash')} = %s "
        f"ORDER BY s.{q('id')}"
    )


def guard_assertion(write: FactWrite) -> None:
    """Memory's assertion guard (registered in DeletionConfig.ready): `assertion_refusals` of what the
    assertion is about to write, inside its transaction with the fact locked."""
    refusal = assertion_refusals([write]).get(0)
    if refusal is not None:
        raise refusal


def guard_assertions(writes: Sequence[FactWrite]) -> dict[int, DomainError]:
    """The set form of `guard_assertion` for memory.batch (registered as its batch form): refusals by index."""
    return dict(assertion_refusals(writes))


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
