"""The set-based writes of a batch (lib.rows on PostgreSQL, the ORM elsewhere) store exactly what one
`assert_fact` per item stores — awkward text and JSON included — and the batch door's parser reports each item's
problems as a serializer of its own would."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory_admin.accounts.services import ensure_principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.api.serializers import AssertFactSerializer
from memory_admin.lib import rows
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.batch import assert_facts
from memory_admin.memory.errors import InvalidInput
from memory_admin.memory.models import AuditEvent, MemoryRecord
from memory_admin.shapes.items import ItemParser, assertion_of
from tests.support import at, body

# Text PostgreSQL's array syntax gives a meaning to (quotes, backslashes, braces, commas, the word NULL, spaces).
AWKWARD = ['say "hi"', "back\\slash", "{braces}", "a,b", "NULL", "  padded  ", "", "ünïcødé ✓ 日本", '\\"}']


def awkward(subject: str, n: int, revision: str = "r1", **kwargs: Any) -> Assertion:
    return Assertion(
        project_id="project-s",
        subject_id=subject,
        predicate="note",
        value={"text": AWKWARD[n % len(AWKWARD)], "all": AWKWARD, "nested": [None, {"k": "v\\"}], "n": n},
        valid_from=kwargs.pop("valid_from", at(10, 20)),
        source_canonical_ref=f'import:"{subject}"\\{{x,y}}',
        source_revision=revision,
        derived_from=kwargs.pop("derived_from", None),
        **kwargs,
    )


SCRIPT = [awkward(f"s{n}", n) for n in range(len(AWKWARD))] + [
    awkward("s0", 1, "r2", expected_revision=1, valid_to=at(12, 1)),  # supersedes item 0 (the old head cut)
    awkward("s1", 2, "r0"),  # an older revision imported late: history, with a reason
    awkward("s2", 2, "r2", expected_revision=1, valid_from=at(11, 1)),  # a scheduled successor
]


def _rows(tenant_id: int) -> list[tuple[Any, ...]]:
    revision: dict[int | None, int] = dict(
        MemoryRecord.all_objects.filter(tenant_id=tenant_id).values_list("pk", "revision")
    )
    fields = [
        f.attname
        for f in MemoryRecord._meta.concrete_fields
        if f.attname not in ("id", "tenant_id", "project_id", "memory_id", "issuer_id", "recheck_claimed_at")
    ]
    out = []
    for r in MemoryRecord.all_objects.filter(tenant_id=tenant_id).order_by("subject_id", "revision"):
        row = {name: getattr(r, name) for name in fields}
        row["superseded_by_id"] = revision.get(r.superseded_by_id)  # the successor by revision, not id
        out.append(tuple(sorted(row.items())))
    return out


def _events(tenant_id: int) -> list[tuple[Any, ...]]:
    revision = dict(MemoryRecord.all_objects.filter(tenant_id=tenant_id).values_list("memory_id", "revision"))
    subject = dict(MemoryRecord.all_objects.filter(tenant_id=tenant_id).values_list("memory_id", "subject_id"))

    def named(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
        if snapshot and snapshot.get("superseded_by"):
            snapshot = {**snapshot, "superseded_by": revision[snapshot["superseded_by"]]}
        return snapshot

    events = AuditEvent.objects.filter(tenant_id=tenant_id, object_type="record")
    return sorted(
        (
            subject[e.object_id],
            revision[e.object_id],
            e.action,
            e.actor_name,
            e.at,
            e.reason,
            repr(named(e.before)),
            repr(named(e.after)),
        )
        for e in events
    )


def test_a_batch_stores_every_column_and_audit_event_as_assert_fact_does(db):
    """The same script, awkward text included, one by one in one tenant and as batches in another: every
    column of every row (successors by revision) and every audit event (actor, time, reason, snapshots)."""
    one = ensure_principal("one-by-one", "agent-1", ["agent"])
    many = ensure_principal("batched", "agent-1", ["agent"])
    now = at(10, 25)
    with tenant_context(one.tenant_id):
        expected = [assert_fact(one, a, now=now).outcome.value for a in SCRIPT]
        one_rows, one_events = _rows(one.tenant_pk), _events(one.tenant_pk)
    with tenant_context(many.tenant_id):
        half = len(SCRIPT) // 2
        first = assert_facts(many, SCRIPT[:half], now=now)
        second = assert_facts(many, SCRIPT[half:], now=now)
        got = [item.outcome for item in first.items + second.items]
        many_rows, many_events = _rows(many.tenant_pk), _events(many.tenant_pk)
        stored = MemoryRecord.all_objects.filter(tenant_id=many.tenant_pk, subject_id="s3", revision=1).get()
    assert got == expected and "history" in got and got.count("created") == len(SCRIPT) - 1
    assert many_rows == one_rows
    assert many_events == one_events
    assert stored.value["all"] == AWKWARD and stored.source_canonical_ref == 'import:"s3"\\{x,y}'


def test_a_batch_results_hold_the_records_as_stored(agent):
    result = assert_facts(agent, [awkward("r1", 0), awkward("r1", 1, "r2", expected_revision=1)], now=at(10, 21))
    first, second = (item.result for item in result.items)
    assert first is not None and second is not None
    assert MemoryRecord.objects.get(pk=second.record.pk).memory_id == second.record.memory_id
    assert MemoryRecord.objects.get(pk=first.record.pk).superseded_by_id == second.record.pk
    assert not second.record._state.adding  # saved, as bulk_create leaves them


def test_revisions_continue_past_versions_hidden_by_a_deletion(agent):
    """A version hidden by a deletion (awaiting purge) is neither locked nor the head, but its revision counts."""
    hidden = assert_fact(agent, awkward("gone", 0), now=at(10, 20, 10)).record
    MemoryRecord.all_objects.filter(pk=hidden.pk).update(tombstoned_at=at(10, 20, 11), status="deleted", is_head=False)
    result = assert_facts(agent, [awkward("gone", 1, "r2"), awkward("fresh", 1)], now=at(10, 21))
    assert [item.outcome for item in result.items] == ["created", "created"]
    again = result.items[0].result
    assert again is not None and again.record.revision == 2 and again.record.is_head
    assert MemoryRecord.all_objects.get(pk=hidden.pk).status == "deleted"


def test_a_batch_reads_and_writes_only_its_own_tenants_facts(agent, outsider):
    with tenant_context(outsider.tenant_id):
        theirs = assert_fact(outsider, awkward("shared", 0), now=at(10, 20)).record
    result = assert_facts(agent, [awkward("shared", 1)], now=at(10, 21))
    assert result.items[0].outcome == "created" and result.items[0].result is not None
    assert result.items[0].result.record.revision == 1  # not a successor of the other tenant's fact
    with tenant_context(outsider.tenant_id):
        still = MemoryRecord.objects.get(pk=theirs.pk)
    assert still.is_head and still.status == "accepted" and still.superseded_by_id is None


@pytest.mark.postgres_only(reason="PostgreSQL's array syntax, which lib.rows sends each column in")
def test_array_literals_round_trip_through_postgresql(db):
    values = [*AWKWARD, None, "x" * 5000, "\t tab and\nnewline", "'single'"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[]", [rows.array_literal(values)])
        assert cursor.fetchone()[0] == values
        without_nulls = [v for v in values if v is not None]
        cursor.execute("SELECT %s::text[]", [rows.array_literal(without_nulls)])
        assert cursor.fetchone()[0] == without_nulls
        cursor.execute("SELECT %s::text[]", [rows.array_literal([])])
        assert cursor.fetchone()[0] == []


@pytest.mark.postgres_only(reason="lib.rows's INSERT ... SELECT FROM unnest(...), PostgreSQL's set-based insert")
def test_a_naive_datetime_is_refused_rather_than_guessed(agent):
    naive = datetime(2026, 10, 20, 9, 0)
    columns = {"tenant_id": [agent.tenant_id], "at": [naive], "actor_name": ["x"], "action": ["a"]}
    with pytest.raises(ValueError, match="aware"):
        rows.insert_columns(AuditEvent, {**columns, "object_type": ["record"], "object_id": ["m"], "reason": [""]})
    assert not AuditEvent.objects.filter(actor_name="x").exists()


def test_a_nul_character_is_refused_before_it_reaches_the_database():
    with pytest.raises(ValueError, match="NUL"):
        rows.array_literal(["fine", "bad\x00"])
    with pytest.raises(ValueError, match="NUL"):
        rows.array_literal(["fine", None, "bad\x00"])


def _through_a_serializer(raw: dict[str, Any]) -> Assertion | dict[str, list[str]]:
    """What a serializer of its own makes of one item (the door's parse before ItemParser): the assertion, or
    the errors by field."""
    serializer = AssertFactSerializer(data=raw)
    if serializer.is_valid():
        return assertion_of(serializer.validated_data)

    def flat(problems: Any) -> list[str]:
        if isinstance(problems, dict):
            return [f"{key}: {e}" for key, value in problems.items() for e in flat(value)]
        if isinstance(problems, list):
            return [e for item in problems for e in flat(item)]
        return [str(problems)]

    return {str(name): flat(problems) for name, problems in serializer.errors.items()}


GOOD = body(awkward("p1", 0))
SOURCE = GOOD["source"]
VARIANTS: list[dict[str, Any]] = [
    GOOD,
    {**GOOD, "subject_id": "bad/id", "valid_from": "not a date"},
    {**GOOD, "source": {"canonical_ref": ""}},
    {**GOOD, "derived_from": [{"memory_id": 5}], "expected_revision": -1},
    {**GOOD, "derived_from": [{"memory_id": "mem_x", "revision": 2}]},
    {key: value for key, value in GOOD.items() if key != "value"},
    {**GOOD, "value": None},
    {**GOOD, "value": ""},
    {**GOOD, "value": [0, False, None, "x"]},
    {**GOOD, "value": {1, 2}},  # not JSON (a Python caller)
    {**GOOD, "valid_to": "2026-12-01T00:00:00+09:00", "expected_revision": 3},
    {**GOOD, "valid_to": None, "expected_revision": None},
    {**GOOD, "valid_from": "2026-10-20T00:00:00Z"},
    {**GOOD, "valid_from": " 2026-10-20T00:00:00+05:30 "},
    {**GOOD, "valid_from": "2026-10-20T00:00:00"},  # naive
    {**GOOD, "valid_from": "0999-12-31T00:00:00+00:00"},
    {**GOOD, "valid_from": "2026-10-20"},
    {**GOOD, "valid_from": 1760918400},
    {**GOOD, "valid_to": "yesterday"},
    {**GOOD, "expected_revision": True},
    {**GOOD, "expected_revision": 2.0},
    {**GOOD, "expected_revision": "2"},
    {**GOOD, "expected_revision": 2**31},
    {**GOOD, "expected_revision": 2**31 - 1},
    {**GOOD, "project_id": 7},
    {**GOOD, "project_id": " padded"},
    {**GOOD, "project_id": "p" * 100},
    {**GOOD, "project_id": "p" * 101},
    {**GOOD, "subject_id": "ünïcødé"},
    {**GOOD, "predicate": "a/b"},
    {**GOOD, "predicate": "_ok.v1:x@y+z-w"},
    {**GOOD, "source": {**SOURCE, "canonical_ref": " padded "}},
    {**GOOD, "source": {**SOURCE, "canonical_ref": "tab\tinside"}},
    {**GOOD, "source": {**SOURCE, "canonical_ref": "nul\x00inside"}},
    {**GOOD, "source": {**SOURCE, "canonical_ref": "r" * 500}},
    {**GOOD, "source": {**SOURCE, "canonical_ref": "r" * 501}},
    {**GOOD, "source": {**SOURCE, "revision": 17}},
    {**GOOD, "source": {**SOURCE, "revision": "v" * 101}},
    {**GOOD, "source": {**SOURCE, "event_ids": ["evt_1"]}},
    {**GOOD, "source": {**SOURCE, "extra": 1}},
    {**GOOD, "source": "crm"},
    {**GOOD, "memory_id": "mem_from_an_export", "status": "accepted"},  # an export line's extra fields
]


@pytest.mark.parametrize("raw", VARIANTS, ids=range(len(VARIANTS)))
def test_one_parser_answers_each_item_as_a_serializer_of_its_own(raw):
    parse = ItemParser()
    parse(GOOD)  # the parser has validated another item first: nothing of it sticks
    got, want = parse(raw), _through_a_serializer(raw)
    if isinstance(want, Assertion):
        assert isinstance(got, Assertion) and got == want
        assert [d and d.isoformat() for d in (got.valid_from, got.valid_to)] == [
            d and d.isoformat() for d in (want.valid_from, want.valid_to)
        ]
    else:
        assert isinstance(got, InvalidInput) and got.extra["errors"] == want


def test_a_list_that_is_not_an_object_is_refused_per_item():
    got = ItemParser()(["not", "an", "object"])
    assert isinstance(got, InvalidInput) and "non_field_errors" in got.extra["errors"]


def _plan(sql: str, params: Any = None) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres_only(reason="the plans PostgreSQL's planner chooses (EXPLAIN)")
def test_a_batch_reads_its_facts_key_by_key_never_by_hashing_the_tenants_records(agent):
    """The batch's two reads look each key up on its own (a correlated MAX, a LATERAL subquery kept apart by
    OFFSET 0), so no plan can hash the tenant's records, whatever the statistics say of the tenant: when they had
    not seen a tenant importing into a large table, the join was planned as a hash of every record of the tenant
    (measured: 1.2-1.7 s per batch of 1,000 at 370,000 records)."""
    assert_facts(agent, [awkward("a", 0), awkward("b", 1)], now=at(10, 20, 10))
    with CaptureQueriesContext(connection) as queries:
        result = assert_facts(
            agent, [awkward("a", 2, "r2", expected_revision=1), awkward("b", 3, "r2", expected_revision=1)]
        )
    assert [item.outcome for item in result.items] == ["created", "created"]
    highest = [q["sql"] for q in queries.captured_queries if "max(v.revision)" in q["sql"]]
    locking = [q["sql"] for q in queries.captured_queries if "CROSS JOIN LATERAL" in q["sql"]]
    assert len(highest) == len(locking) == 1
    plan = _plan(highest[0])
    assert "SubPlan" in plan and "Hash" not in plan and "Merge" not in plan, plan
    plan = _plan(locking[0])
    assert "Nested Loop" in plan and "Hash" not in plan and "Merge" not in plan, plan


@pytest.mark.postgres_only(reason="autovacuum's per-table settings are PostgreSQL's")
def test_the_records_are_analyzed_after_ten_thousand_changed_rows_not_ten_percent(db):
    """Migration memory/0014: the read paths' plans follow a tenant's import into a large table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'memory_memoryrecord'::regclass")
        options = set(cursor.fetchone()[0] or [])
    assert {"autovacuum_analyze_scale_factor=0.002", "autovacuum_analyze_threshold=10000"} <= options
