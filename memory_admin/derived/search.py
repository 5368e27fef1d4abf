"""Retrieval as an agent sees it: top-k from the vector index, filtered to usable records by default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.derived.vectors import get_index
from memory_admin.memory.models import MemoryRecord

# Hits are over-fetched before the database check, so held-back copies do not shrink the answer.
OVERFETCH = 4


@dataclass
class SearchHit:
    record: MemoryRecord
    score: float
    usable: bool
    current: MemoryRecord | None  # the fact's current record, when this hit is not it


@dataclass
class SearchResult:
    results: list[SearchHit]
    held_back: list[SearchHit]  # stale copies the usable filter kept from the agent


def search(principal: Principal, *, project_id: str | None, q: str, k: int, include_all: bool = False) -> SearchResult:
    """The index proposes; the database decides. A hit is usable only if its record is the current belief
    now (accepted, the fact's head, valid now) — whatever the index entry says, so an entry not yet
    refreshed after a change can never hand a stale value to an agent."""
    tenant_id: int = principal.tenant_id  # type: ignore[assignment]
    hits = get_index().search(
        tenant_id=tenant_id, project_id=project_id, text=q, k=k * OVERFETCH, usable_only=False, kind="record"
    )
    by_id = {
        r.memory_id: r
        for r in MemoryRecord.objects.filter(
            tenant_id=principal.tenant_id, memory_id__in=[h.object_id for h in hits]
        ).select_related("project", "issuer")
    }
    now = timezone.now()
    ranked = [(by_id[h.object_id], h.score) for h in hits if h.object_id in by_id]
    stale = [record for record, _ in ranked if not record.is_current_at(now)]
    heads = _current_of(stale, now)
    usable: list[SearchHit] = []
    held_back: list[SearchHit] = []
    for record, score in ranked:
        ok = record.is_current_at(now)
        hit = SearchHit(record=record, score=score, usable=ok, current=None if ok else heads.get(_fact(record)))
        (usable if ok else held_back).append(hit)
    if include_all:
        return SearchResult(results=sorted(usable + held_back, key=lambda h: -h.score)[:k], held_back=[])
    return SearchResult(results=usable[:k], held_back=held_back[:k])


def _fact(record: MemoryRecord) -> tuple[int, str, str]:
    return (record.project_id, record.subject_id, record.predicate)


def _current_of(records: list[MemoryRecord], now: Any) -> dict[tuple[int, str, str], MemoryRecord]:
    if not records:
        return {}
    heads = MemoryRecord.objects.filter(
        tenant_id=records[0].tenant_id,
        is_head=True,
        subject_id__in={r.subject_id for r in records},
        predicate__in={r.predicate for r in records},
        project_id__in={r.project_id for r in records},
    )
    return {_fact(h): h for h in heads if h.is_current_at(now)}
