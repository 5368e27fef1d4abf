"""The derived stores' items as the doors render them: a notice to an agent, a search hit (the API's
`GET /invalidations/` and `GET /search/`, the MCP tools `pending_notices` and `search_memory`)."""

from __future__ import annotations

from typing import Any

from memory_admin.derived import search
from memory_admin.derived.embedding import embedder_status
from memory_admin.derived.models import Invalidation
from memory_admin.memory.shapes import source_payload
from memory_admin.shapes.fields import iso as _iso


def invalidation_payload(notice: Invalidation) -> dict[str, Any]:
    return {
        "id": notice.public_id,
        "memory_id": notice.memory_id,
        "revision": notice.revision,
        "session_id": notice.load.session_id,
        "context_load_id": notice.load.public_id,
        "reason": notice.reason,
        "current_memory_id": notice.successor.memory_id if notice.successor_id else None,  # type: ignore[union-attr]
        "created_at": _iso(notice.created_at),
        "acknowledged_at": _iso(notice.acknowledged_at),
    }


def hit_payload(hit: search.SearchHit) -> dict[str, Any]:
    record, view = hit.record, hit.view
    return {
        "memory_id": record.memory_id,
        "project_id": record.project.key,
        "subject_id": record.subject_id,
        "predicate": record.predicate,
        "value": record.value,
        "status": record.status,
        "revision": record.revision,
        # docs/retrieval.md: cosine similarity in [-1, 1] for a vector hit, null for a keyword match (not embedded
        # yet); `rank` is the 1-based place in the answer (reciprocal-rank fusion of the two).
        "score": round(hit.score, 6) if hit.score is not None else None,
        "match": hit.match,
        "rank": hit.rank,
        "usable": hit.usable,
        "current_memory_id": hit.current.memory_id if hit.current else None,
        "current_value": hit.current.value if hit.current else None,
        # Why a hit is held back (null when usable), and the valid time that decides "not yet in effect".
        "reason_code": hit.reason_code,
        "reason": hit.reason,
        "valid_from": record.valid_from.isoformat(),
        "valid_to": record.valid_to.isoformat() if record.valid_to else None,
        "recheck_after": _iso(record.recheck_after),
        "source": source_payload(record),
        # What `GET /facts/current/` says of a usable hit (same rule, reads.record_views); null when held back.
        "freshness": view.freshness if view else None,
        "last_verified_at": _iso(view.last_verified_at) if view else None,
        "last_verified_value": view.last_verified_value if view else None,
        "caveat": view.caveat if view else None,
        "action_allowed": view.action_allowed if view else None,
    }


def embedder_payload() -> dict[str, Any]:
    """Which embedder ranked a search (`embedder` of `GET /search/` and of MCP `search_memory`): its name, and
    `fallback: true` with a sentence when the configured model could not load and words, not meaning, match."""
    status = embedder_status()
    return {
        "name": status.name,
        "fallback": status.fallback,
        "detail": (
            "The language model could not load on this server: search matches words, not meaning."
            if status.fallback
            else None
        ),
    }
