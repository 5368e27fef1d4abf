"""Retrieval as an agent sees it: top-k from the vector index, filtered to usable records by default."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.derived.vectors import get_index
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.reads import FactView, record_views

# Hits are over-fetched before the database check, so held-back copies do not shrink the answer.
OVERFETCH = 4

Status = MemoryRecord.Status


@dataclass
class SearchHit:
    record: MemoryRecord
    score: float
    usable: bool
    current: MemoryRecord | None  # the fact's current record, when this hit is not it
    # Why the hit is held back (None when usable): a code from REASONS and a sentence a person can read.
    reason_code: str | None = None
    reason: str | None = None
    # For a usable hit whose successor is already recorded: the successor, in effect from `record.valid_to`.
    next: MemoryRecord | None = None
    # For a usable hit: what `GET /facts/current/` says of it (freshness, caveat, action allowed), by the
    # same rule (`reads.record_views`); None for a held-back hit.
    view: FactView | None = None


@dataclass
class SearchResult:
    results: list[SearchHit]
    held_back: list[SearchHit]  # copies the usable filter kept from the agent, each with its reason
    # Index entries whose record no read path returns any more (tombstoned by a deletion, or purged):
    # counted, never shown, so a deleted memory's id or value cannot leak through the preview.
    dropped: int = 0


def search(
    principal: Principal,
    *,
    project_id: str | None,
    q: str,
    k: int,
    include_all: bool = False,
    now: datetime | None = None,
) -> SearchResult:
    """The index proposes; the database decides, at the query time `now`.

    A hit is usable only if its record is the current belief at `now` (accepted and valid then), whatever
    the index entry's stored flag says. So an entry not yet refreshed after a change never hands a stale
    value to an agent, and a value whose successor is not in effect yet is still today's answer even
    before (or without) the valid-time transition task re-marking the index.
    """
    now = now or timezone.now()
    tenant_id: int = principal.tenant_pk
    hits = get_index().search(
        tenant_id=tenant_id, project_id=project_id, text=q, k=k * OVERFETCH, usable_only=False, kind="record"
    )
    by_id = {
        r.memory_id: r
        for r in MemoryRecord.objects.filter(
            tenant_id=principal.tenant_id, memory_id__in=[h.object_id for h in hits]
        ).select_related("project", "issuer", "superseded_by")
    }
    ranked = [(by_id[h.object_id], h.score) for h in hits if h.object_id in by_id]
    dropped = len(hits) - len(ranked)
    currents = _current_of([record for record, _ in ranked], now)
    usable: list[SearchHit] = []
    held_back: list[SearchHit] = []
    for record, score in ranked:
        ok = record.is_current_at(now)
        if ok:
            hit = SearchHit(record=record, score=score, usable=True, current=None, next=_successor(record))
            usable.append(hit)
        else:
            code, reason = held_back_reason(record, now)
            hit = SearchHit(
                record=record,
                score=score,
                usable=False,
                current=currents.get(_fact(record)),
                reason_code=code,
                reason=reason,
            )
            held_back.append(hit)
    if include_all:
        results = sorted(usable + held_back, key=lambda h: -h.score)[:k]
        _attach_views(results, now)
        return SearchResult(results=results, held_back=[], dropped=dropped)
    _attach_views(usable[:k], now)
    return SearchResult(results=usable[:k], held_back=held_back[:k], dropped=dropped)


def _attach_views(hits: list[SearchHit], now: datetime) -> None:
    """The governance facts of the usable hits returned, in a constant number of queries."""
    views = record_views([h.record for h in hits if h.usable], now)
    for hit in hits:
        hit.view = views.get(hit.record.pk) if hit.usable else None


# Codes of `SearchHit.reason_code` (the API's `reason_code`).
REASONS = ("superseded", "excluded", "expired", "disputed", "not_yet_in_effect", "tombstoned")


def held_back_reason(record: MemoryRecord, now: datetime) -> tuple[str, str]:
    """Why `record` is not handed to an agent at `now`: a code from REASONS and a readable sentence."""
    successor = record.superseded_by
    if record.status == Status.ACCEPTED:
        if record.valid_from > now:
            return "not_yet_in_effect", f"Not yet in effect: takes effect {record.valid_from.isoformat()}."
        # Accepted, but its validity has ended; the transition task has not settled it yet.
        if successor is not None:
            return "superseded", f"Superseded by {successor.memory_id} from {_iso(record.valid_to)}."
        return "expired", f"Expired: its validity ended {_iso(record.valid_to)}."
    if record.status == Status.SUPERSEDED:
        return "superseded", f"Superseded by {successor.memory_id}." if successor is not None else "Superseded."
    if record.status == Status.EXCLUDED:
        why = record.status_reason or "kept, but never put into an agent's context"
        return "excluded", f"Excluded: {why}"
    if record.status == Status.EXPIRED:
        return "expired", f"Expired: its validity ended {_iso(record.valid_to)}."
    if record.status == Status.DISPUTED:
        return "disputed", "Disputed: sources disagree and no rule orders them; an owner must resolve it."
    # A tombstoned record never reaches here through the live manager; kept so every status has a reason.
    return "tombstoned", "Tombstoned by a deletion request."


def _iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "(unknown)"


def _successor(record: MemoryRecord) -> MemoryRecord | None:
    """The recorded successor of a usable record: it takes over when `record.valid_to` passes."""
    successor = record.superseded_by
    return successor if successor is not None and record.valid_to is not None else None


def _fact(record: MemoryRecord) -> tuple[int, str, str]:
    return (record.project_id, record.subject_id, record.predicate)


def _current_of(records: list[MemoryRecord], now: datetime) -> dict[tuple[int, str, str], MemoryRecord]:
    """The current record at `now` of each fact that a held-back hit belongs to (usable hits are their own)."""
    held = [r for r in records if not r.is_current_at(now)]
    if not held:
        return {}
    facts = Q()
    for project_id, subject_id, predicate in {_fact(r) for r in held}:
        facts |= Q(project_id=project_id, subject_id=subject_id, predicate=predicate)
    currents = MemoryRecord.objects.filter(tenant_id=held[0].tenant_id).current(now).filter(facts)
    return {_fact(r): r for r in currents}
