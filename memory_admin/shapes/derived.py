"""The derived stores' items as the doors render them: a notice to an agent, a search hit (the API's
`GET /invalidations/` and `GET /search/`, the MCP tools `pending_notices` and `search_memory`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from memory_admin.derived import search
from memory_admin.derived.embedding import embedder_status
from memory_admin.derived.models import Invalidation
from memory_admin.memory.reads import FRESHNESS
from memory_admin.memory.shapes import source_payload
from memory_admin.shapes.fields import IsoDateTimeField
from memory_admin.shapes.fields import iso as _iso
from memory_admin.shapes.records import SourceOutSerializer


class InvalidationOutSerializer(serializers.Serializer):
    """One invalidation notice."""

    # The API's `GET /agents/{agent_id}/invalidations/` and MCP `pending_notices` (invalidation_payload).

    id = serializers.CharField(source="public_id")
    memory_id = serializers.CharField()
    revision = serializers.IntegerField()
    session_id = serializers.CharField(source="load.session_id")
    context_load_id = serializers.CharField(source="load.public_id")
    reason = serializers.CharField(allow_blank=True)
    current_memory_id = serializers.CharField(source="successor.memory_id", allow_null=True)
    created_at = IsoDateTimeField()
    acknowledged_at = IsoDateTimeField(allow_null=True)


def invalidation_payload(notice: Invalidation) -> dict[str, Any]:
    return InvalidationOutSerializer(notice).data


class ScoreField(serializers.FloatField):
    """A search hit's similarity, rounded to 6 decimals."""

    def to_representation(self, value: float) -> Any:
        return round(value, 6)


class SearchHitSerializer(serializers.Serializer):
    """One retrieval hit (rendered by hit_payload)."""

    # Rendered by the hand-built hit_payload: bench/serializers.py shows it pays on search
    # (docs/hand-built-rows.md); tests/api/test_hand_built_rows.py holds the two to the same output.

    memory_id = serializers.CharField(source="record.memory_id")
    project_id = serializers.CharField(source="record.project.key")
    subject_id = serializers.CharField(source="record.subject_id")
    predicate = serializers.CharField(source="record.predicate")
    value = serializers.JSONField(source="record.value")
    status = serializers.CharField(source="record.status")
    revision = serializers.IntegerField(source="record.revision")
    score = ScoreField(
        allow_null=True,
        help_text="Cosine similarity of the query's and the record's embeddings, in [-1, 1], higher is closer; "
        'null for a keyword match (`match: "keyword"`: written a moment ago, not embedded yet).',
    )
    match = serializers.ChoiceField(
        choices=[search.Match.VECTOR, search.Match.KEYWORD],
        help_text="vector: proposed by the vector index; keyword: not embedded yet, matched by the query's words.",
    )
    rank = serializers.IntegerField(
        min_value=1, help_text="1-based place in the answer (reciprocal-rank fusion of vector and keyword hits)."
    )
    usable = serializers.BooleanField()
    current_memory_id = serializers.CharField(source="current.memory_id", allow_null=True)
    current_value = serializers.JSONField(source="current.value", allow_null=True)
    # Why a hit is held back (null when usable), and the valid time that decides "not yet in effect".
    reason_code = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_null=True)
    valid_from = IsoDateTimeField(source="record.valid_from")
    valid_to = IsoDateTimeField(source="record.valid_to", allow_null=True)
    recheck_after = IsoDateTimeField(source="record.recheck_after", allow_null=True)
    source = SourceOutSerializer(source="record")  # type: ignore[assignment]
    # What `GET /facts/current/` says of a usable hit (same rule, reads.record_views); null when held back.
    freshness = serializers.ChoiceField(source="view.freshness", choices=list(FRESHNESS), allow_null=True)
    last_verified_at = IsoDateTimeField(source="view.last_verified_at", allow_null=True)
    last_verified_value = serializers.JSONField(source="view.last_verified_value", allow_null=True)
    caveat = serializers.CharField(source="view.caveat", allow_null=True)
    action_allowed = serializers.BooleanField(source="view.action_allowed", allow_null=True)

    def to_representation(self, instance: search.SearchHit) -> dict[str, Any]:
        return hit_payload(instance)


def hit_payload(hit: search.SearchHit) -> dict[str, Any]:
    """The hand-built row of SearchHitSerializer (docs/hand-built-rows.md)."""
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
        "reason_code": hit.reason_code,
        "reason": hit.reason,
        "valid_from": record.valid_from.isoformat(),
        "valid_to": record.valid_to.isoformat() if record.valid_to else None,
        "recheck_after": _iso(record.recheck_after),
        "source": source_payload(record),
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
