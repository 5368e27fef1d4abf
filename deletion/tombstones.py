"""Tombstones: content-free marks that hide deleted content and refuse to let it come back.

Every write path calls one of the `refuse_*` checks inside its own transaction; a refusal raises
Tombstoned (HTTP 410) and is logged as a RefusedWrite once the transaction has rolled back. The memory and
derived layers know nothing of deletion: DeletionConfig.ready() registers these checks as their write
guards (`memory.hooks`, `derived.hooks`), and `refusals_logged` as the scope around every guarded write.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db.models import Q

from deletion.models import RefusedWrite, Tombstone
from memory_admin.derived.models import Event
from memory_admin.memory.errors import Tombstoned
from memory_admin.memory.hooks import FactWrite


def keyed(*parts: Any) -> str:
    """A keyed hash (HMAC-SHA256 with the deployment's secret): it matches, but cannot be reversed
    by guessing low-entropy identifiers without the key."""
    message = "\x1f".join(str(p) for p in parts).encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


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


def _refuse(stone: Tombstone, why: str) -> None:
    raise Tombstoned(f"Refused: {why} (deletion {stone.request_public_id}).", _tombstone_id=stone.pk)


def refuse_derived_from(tenant_id: int, memory_ids: Iterable[str], what: str) -> None:
    """A write derived from a deleted item."""
    ids = [m for m in memory_ids if m]
    if not ids:
        return
    stone = live().filter(tenant_id=tenant_id, kind=Tombstone.Kind.RECORD, memory_id__in=ids).first()
    if stone is not None:
        _refuse(stone, f"{what} is derived from deleted memory {stone.memory_id}")


def refuse_assertion(
    tenant_id: int,
    project: str,
    subject: str,
    predicate: str,
    *,
    value: Any,
    source_ref: str,
    source_revision: str,
    derived_from: Iterable[str] = (),
    event_ids: Iterable[str] = (),
) -> None:
    """An assertion that would bring deleted content back: derived from a deleted item, re-asserting a
    deleted value of the fact, coming from the very source revision that was deleted, or extracted from
    redacted log lines. A new value from a new source is accepted."""
    refuse_derived_from(tenant_id, derived_from, "This fact")
    stones = list(live().filter(tenant_id=tenant_id, scope_hash=fact_scope(tenant_id, project, subject, predicate)))
    if stones:
        value_hash, source_hash = value_digest(value), source_digest(source_ref, source_revision)
        for stone in stones:
            if stone.value_hash == value_hash:
                _refuse(stone, "this value of the fact was deleted")
            if stone.source_hash == source_hash:
                _refuse(stone, "this source revision predates the deletion of the fact")
    ids = [e for e in event_ids if e]
    if ids:
        if (
            Event.objects.filter(tenant_id=tenant_id, public_id__in=ids)
            .filter(Q(hidden_at__isnull=False) | Q(redacted_at__isnull=False))
            .exists()
        ):
            stone = live().filter(tenant_id=tenant_id).order_by("-id").first()
            if stone is not None:
                _refuse(stone, "it is extracted from log lines a deletion removed")


def guard_assertion(write: FactWrite) -> None:
    """Memory's assertion guard (registered in DeletionConfig.ready): `refuse_assertion` on what the
    assertion is about to write, inside its transaction with the fact locked."""
    refuse_assertion(
        write.tenant_id,
        write.project_id,
        write.subject_id,
        write.predicate,
        value=write.value,
        source_ref=write.source_canonical_ref,
        source_revision=write.source_revision,
        event_ids=write.event_ids,
        derived_from=[d.get("memory_id", "") for d in write.derived_from],
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
