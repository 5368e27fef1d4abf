"""The hand-built rows kept on hot paths (docs/hand-built-rows.md) render exactly what their serializer's declared
fields render: the same keys in the same order and the same values. A field declared on RecordSerializer,
FactSerializer or SearchHitSerializer and missing from record_payload, fact_payload or hit_payload (or the other
way round, or formatted otherwise) fails here, so the declared fields stay the truth the OpenAPI schema shows."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from memory_admin.derived import search
from memory_admin.memory import reads
from memory_admin.memory.actions import Outcome, assert_fact
from memory_admin.memory.models import FieldPolicy, MemoryRecord
from memory_admin.memory.shapes import payload_columns
from memory_admin.shapes.derived import SearchHitSerializer
from memory_admin.shapes.fields import declared_representation
from memory_admin.shapes.records import FactSerializer, RecordSerializer
from tests.support import DEADLINE, at, deadline

pytestmark = pytest.mark.django_db


def assert_same_row(serializer: serializers.Serializer, instance: Any) -> dict[str, Any]:
    hand_built = serializer.to_representation(instance)
    declared = declared_representation(serializer, instance)
    # Keys first, so a field missing on one side is named in the failure.
    assert list(hand_built) == list(declared), type(serializer).__name__
    assert list(hand_built.items()) == list(declared.items())
    assert hand_built["source"] is None or list(hand_built["source"]) == list(declared["source"])
    return hand_built


@pytest.fixture
def disputed(agent, other_agent, admin) -> None:
    """Two unorderable values of the deadline (both rank 0): a dispute with two candidates."""
    FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate=DEADLINE["predicate"],
        authorized_issuers=["agent-7", "agent-9"],
        canonical_ref_prefix="task-system:",
    )
    assert_fact(other_agent, deadline("2026-11-09", "x1", at(10, 20), ref="chat:msg-0"))
    result = assert_fact(agent, deadline("2026-11-02", "1", at(10, 20), ref="chat:msg-1", expected_revision=1))
    assert result.outcome == Outcome.DISPUTED


def test_record_rows_match_the_declared_record(moved_deadline):
    serializer = RecordSerializer()
    loaded = list(MemoryRecord.objects.order_by("id"))  # relations read on access (as-of, a single record)
    with_columns = list(payload_columns(MemoryRecord.objects.order_by("id")))  # the record list, history
    assert len(loaded) == 2
    for record in [*loaded, *with_columns]:
        row = assert_same_row(serializer, record)
        assert set(row) == set(serializer.fields)
    older = assert_same_row(serializer, with_columns[0])
    assert older["superseded_by"] == with_columns[1].memory_id  # the links are rendered, not left empty
    assert assert_same_row(serializer, with_columns[1])["supersedes"] == [older["memory_id"]]


def test_fact_rows_match_the_declared_fact(agent, moved_deadline):
    key = (DEADLINE["project_id"], DEADLINE["subject_id"], DEADLINE["predicate"])
    serializer = FactSerializer(context={"key": key})
    row = assert_same_row(serializer, reads.fact_view(agent, *key))
    assert row["value"] == "2026-11-02T17:00+09:00"
    assert "context_load" not in row  # added by the view only when the read names a session_id


def test_disputed_fact_rows_match_the_declared_fact(agent, disputed):
    key = (DEADLINE["project_id"], DEADLINE["subject_id"], DEADLINE["predicate"])
    row = assert_same_row(FactSerializer(context={"key": key}), reads.fact_view(agent, *key))
    assert row["dispute_id"] is not None and len(row["candidates"]) == 2
    assert row["memory_id"] is None and row["source"] is None  # no record answers while the dispute is open


def test_search_hit_rows_match_the_declared_hit(agent, moved_deadline):
    found = search.search(agent, project_id=DEADLINE["project_id"], q="submission deadline", k=10, include_all=True)
    hits = [*found.results, *found.held_back]
    assert hits
    for hit in hits:
        assert_same_row(SearchHitSerializer(), hit)
