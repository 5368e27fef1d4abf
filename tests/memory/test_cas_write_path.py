"""The fast path of one assertion (issue 16, CAS writes): the statements it sends, not only what they decide.

On PostgreSQL the fact's lock, the field's policy and the new version's id come in one round trip, and a
supersession writes the old head in one UPDATE before the INSERT; on SQLite the same decisions take the
three-statement path. Either way the rows are those `save()` would write (lib.rows).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext

from memory_admin.lib import rows
from memory_admin.memory.actions import Outcome, assert_fact, expire_record, fact_lock_key
from memory_admin.memory.errors import IssuerNotAuthorized
from memory_admin.memory.models import AuditEvent, FieldPolicy, MemoryRecord, Project
from memory_admin.memory.policies import locked_policy_for, policy_for
from tests.support import DEADLINE, at, deadline, on_postgres


def _record_statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"].split()[0].upper() for q in queries.captured_queries if '"memory_memoryrecord"' in q["sql"]]


def test_a_supersession_writes_the_old_head_and_the_new_version(agent):
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1))
    with CaptureQueriesContext(connection) as queries:
        second = assert_fact(
            agent,
            deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1),
            now=at(10, 22, 9, 1),
        )
    assert second.outcome == Outcome.CREATED
    old, new = MemoryRecord.objects.get(pk=first.record.pk), MemoryRecord.objects.get(pk=second.record.pk)
    assert (old.status, old.is_head, old.superseded_by_id) == ("superseded", False, new.pk)
    assert (old.valid_to, old.recorded_to, old.valid_to_recorded_at) == (at(10, 22), at(10, 22, 9, 1), at(10, 22, 9, 1))
    assert (new.status, new.is_head, new.entered_current, new.revision) == ("accepted", True, True, 2)
    # What the caller got is what was stored (the API renders it).
    assert second.record.pk == new.pk and second.record.memory_id == new.memory_id
    assert not second.record._state.adding
    events = list(AuditEvent.objects.filter(object_id__in=[old.memory_id, new.memory_id]).order_by("id"))
    assert [e.action for e in events][-2:] == ["record.superseded", "record.asserted.created"]
    assert (events[-2].after or {})["superseded_by"] == new.memory_id and (events[-2].before or {})[
        "status"
    ] == "accepted"
    # PostgreSQL: one UPDATE of the old head, then the INSERT (its id drawn with the lock); elsewhere three.
    expected = ["SELECT", "UPDATE", "INSERT"] if on_postgres() else ["SELECT", "UPDATE", "INSERT", "UPDATE"]
    assert [s for s in _record_statements(queries) if s != "SELECT"] == expected[1:]


def test_an_expired_head_is_superseded_by_the_new_version(agent, admin):
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1))
    expire_record(admin, first.record.memory_id, "Cancelled.", now=at(10, 21))
    second = assert_fact(
        agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1), now=at(10, 22, 9, 1)
    )
    old = MemoryRecord.objects.get(pk=first.record.pk)
    assert (old.status, old.is_head, old.superseded_by_id) == ("superseded", False, second.record.pk)
    # The expiry's cut stays: the new version does not move an ended validity.
    assert old.valid_to == at(10, 21)
    assert MemoryRecord.objects.get(pk=second.record.pk).is_head


def test_a_scheduled_hand_over_cuts_every_accepted_row(agent):
    """A future-effective head leaves today's record accepted; the next write cuts both in its updates."""
    assert_fact(agent, deadline("a", "r1", at(10, 1)), now=at(10, 1, 9, 1))
    later = assert_fact(agent, deadline("b", "r2", at(10, 1) + timedelta(days=60), expected_revision=1), now=at(10, 2))
    newest = assert_fact(agent, deadline("c", "r3", at(10, 3), expected_revision=2), now=at(10, 3, 9, 1))
    assert newest.outcome == Outcome.CREATED
    rows_by_revision = {r.revision: r for r in MemoryRecord.objects.filter(subject_id=DEADLINE["subject_id"])}
    assert [r.revision for r in rows_by_revision.values() if r.is_head] == [3]
    today, scheduled = rows_by_revision[1], rows_by_revision[2]
    assert (today.status, today.valid_to, today.superseded_by_id) == ("superseded", at(10, 3), newest.record.pk)
    # The scheduled value never comes into effect: its validity is cut to nothing, and it keeps no head.
    assert scheduled.pk == later.record.pk and not scheduled.is_head
    assert scheduled.valid_to == scheduled.valid_from and scheduled.superseded_by_id == newest.record.pk


def test_an_unauthorized_issuer_is_refused_inside_the_transaction_with_nothing_stored(agent, admin):
    FieldPolicy.objects.create(tenant_id=admin.tenant_id, predicate=DEADLINE["predicate"], authorized_issuers=["x"])
    with pytest.raises(IssuerNotAuthorized):
        assert_fact(agent, deadline("a", "r1", at(10, 1)))
    assert MemoryRecord.all_objects.count() == 0
    assert not AuditEvent.objects.filter(object_type="record").exists()


def test_the_rows_writes_are_what_save_writes(agent):
    """lib.rows sends save()'s columns with each field's own preparation: a row written by it reads back
    equal to one written by save(), on both backends."""
    made = assert_fact(agent, deadline({"nested": [1, "two"]}, "r1", at(10, 1)), now=at(10, 1, 9, 1)).record
    stored = MemoryRecord.objects.get(pk=made.pk)
    copy = MemoryRecord.objects.get(pk=made.pk)
    # Another version of the fact (history: one accepted belief per valid instant is checked at commit).
    copy.pk, copy.memory_id, copy.is_head, copy.revision, copy.status = None, "mem-copy", False, 9, "superseded"
    with transaction.atomic():
        rows.insert(copy)
    saved = MemoryRecord.objects.get(pk=copy.pk)
    for field in MemoryRecord._meta.concrete_fields:
        if field.attname not in ("id", "memory_id", "is_head", "revision", "status"):
            assert getattr(saved, field.attname) == getattr(stored, field.attname), field.attname
    saved.value, saved.valid_to, saved.status_reason = ["changed"], at(10, 9), "why"
    rows.update(saved, ["value", "valid_to", "status_reason"])
    again = MemoryRecord.objects.get(pk=copy.pk)
    assert (again.value, again.valid_to, again.status_reason, again.status) == (
        ["changed"],
        at(10, 9),
        "why",
        "superseded",
    )


@pytest.mark.django_db
def test_each_fields_preparation_is_the_fields_own_get_db_prep_save():
    """lib.rows prepares the common values of a write without the field's method calls; for every field it writes
    and every kind of value (those it returns at once and those it hands to the field), the result is the field's."""
    from datetime import UTC, datetime

    Status = MemoryRecord.Status

    samples = [
        None,
        "text",
        Status.ACCEPTED,
        "",
        0,
        7,
        True,
        False,
        at(10, 1),
        datetime(2026, 10, 1, 9, 0, tzinfo=UTC),
        {"a": [1, "two"]},
        ["x"],
    ]
    checked = 0
    for model in (MemoryRecord, AuditEvent):
        for field in model._meta.concrete_fields:
            fast = rows.preparer(field)
            for value in samples:
                try:
                    expected = field.get_db_prep_save(value, connection)
                except Exception as exc:  # the field refuses it: so must the fast path
                    with pytest.raises(type(exc)):
                        fast(value)
                    continue
                got = fast(value)
                assert type(got) is type(expected) and repr(got) == repr(expected), (field.name, value)
                checked += 1
    assert checked > 200


@pytest.mark.django_db
def test_an_unsaved_related_object_is_refused_and_a_saved_one_gives_its_id(agent):
    """save()'s check of related objects, made by lib.rows over the foreign keys it writes."""
    made = assert_fact(agent, deadline("a", "r1", at(10, 1)), now=at(10, 1, 9, 1)).record
    record = MemoryRecord.objects.get(pk=made.pk)
    record.superseded_by = MemoryRecord(memory_id="mem-unsaved")
    with pytest.raises(ValueError, match="unsaved related object 'superseded_by'"):
        rows.update(record, ["superseded_by"])
    successor = MemoryRecord.objects.get(pk=made.pk)
    record.superseded_by = MemoryRecord(memory_id="mem-later")
    record.superseded_by.pk = successor.pk  # an id given after the assignment is taken at write time
    rows.update(record, ["superseded_by"])
    assert MemoryRecord.objects.get(pk=made.pk).superseded_by_id == successor.pk


@pytest.mark.django_db
def test_a_row_built_by_position_is_the_one_keywords_build(agent):
    """rows.build(model, values) stands in for model(**values): the same attributes, the related objects cached, the
    defaults of the fields left out, and an unknown name refused."""
    project = Project.objects.create(tenant_id=agent.tenant_id, key="p")
    values = {
        "tenant_id": agent.tenant_id,
        "project": project,
        "subject_id": "s",
        "predicate": "due",
        "value": {"a": 1},
        "status": MemoryRecord.Status.ACCEPTED,
        "valid_from": at(10, 1),
        "recorded_from": at(10, 1, 9),
        "revision": 1,
        "source_canonical_ref": "crm:1",
        "source_revision": "r1",
        "issuer": agent,
        "superseded_by": None,
    }
    fast, slow = rows.build(MemoryRecord, values), MemoryRecord(**values)
    for field in MemoryRecord._meta.concrete_fields:
        assert getattr(fast, field.attname) == getattr(slow, field.attname), field.attname
    assert fast.project is project and fast.issuer is agent and fast.superseded_by is None
    assert fast._state.adding and fast.derived_from == [] and fast.derived_from is not slow.derived_from
    with pytest.raises(TypeError, match="no field"):
        rows.build(MemoryRecord, {**values, "nonsense": 1})


@pytest.mark.django_db
def test_a_snapshot_is_what_a_json_round_trip_gives(agent):
    """audit.snapshot converts the common values itself; the result is json.loads(json.dumps(..)) of the fields."""
    import json
    from datetime import UTC, datetime

    from django.core.serializers.json import DjangoJSONEncoder

    from memory_admin.memory import audit

    made = assert_fact(agent, deadline({"n": 1.5, "t": [1, "x"]}, "r1", at(10, 1)), now=at(10, 1, 9, 1)).record
    made.recheck_after = datetime(2026, 10, 1, 9, 0, 0, 123456, tzinfo=UTC)  # the encoder keeps milliseconds
    made.status = MemoryRecord.Status.SUPERSEDED
    made.status_reason = "why \u00e9"
    got = audit.snapshot(made)
    data = {name: getattr(made, name) for name in audit._SNAPSHOT_FIELDS}
    expected = json.loads(json.dumps(data, cls=DjangoJSONEncoder))
    assert {k: v for k, v in got.items() if k != "superseded_by"} == expected
    assert type(got["status"]) is str and got["recheck_after"] == "2026-10-01T09:00:00.123Z"
    assert json.dumps(got) == json.dumps({**expected, "superseded_by": None})


def test_no_signal_listens_to_the_rows_written_without_save():
    """lib.rows sends no model signal; it may stand in for save() only while nobody listens."""
    for model in (MemoryRecord, AuditEvent):
        assert not pre_save.has_listeners(model) and not post_save.has_listeners(model)


@pytest.mark.postgres_only(reason="pg_advisory_xact_lock and the records' id sequence")
def test_the_locked_policy_read_chooses_as_policy_for_and_draws_an_id(admin):
    tenant = admin.tenant_id
    project = Project.objects.create(tenant_id=tenant, key="project-a")
    FieldPolicy.objects.create(tenant_id=tenant, predicate="due", authorized_issuers=["tenant-wide"])
    own = FieldPolicy.objects.create(tenant_id=tenant, project=project, predicate="due", authorized_issuers=["own"])
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            chosen, first_id = locked_policy_for(
                tenant, "project-a", "due", fact_lock_key(tenant, "project-a", "s", "due")
            )
            assert chosen is not None and chosen.project is not None and chosen.project.key == "project-a"
        assert len(queries.captured_queries) == 1  # the project came with it
        assert chosen.pk == own.pk == policy_for(tenant, "project-a", "due").pk  # type: ignore[union-attr]
        assert list(chosen.authorized_issuers) == ["own"]
        other, _ = locked_policy_for(tenant, "project-b", "due", 1)
        assert other is not None and other.project_id is None and list(other.authorized_issuers) == ["tenant-wide"]
        none, next_id = locked_policy_for(tenant, "project-a", "no-policy", 2)
        assert none is None and next_id > first_id
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
            )
            assert cursor.fetchone()[0] == 3


@pytest.mark.postgres_only(reason="bench/cas_floor.py replays PostgreSQL statements through psycopg")
def test_the_floor_replays_a_captured_supersession_on_another_fact_key(agent):
    """The CAS floor (bench/cas_floor.py): two captured supersessions make a template that, replayed as raw SQL on
    a third fact key, supersedes it as assert_fact would (new head at the next revision, old one superseded)."""
    from bench import cas_floor

    def fact(project: str, subject: str, predicate: str, revisions: int) -> None:
        for n in range(1, revisions + 1):
            assertion = replace(
                deadline(f"v{n}", f"r{n}", at(10, n), expected_revision=n - 1 or None),
                project_id=project,
                subject_id=subject,
                predicate=predicate,
            )
            assert assert_fact(agent, assertion, now=at(10, n, 10)).outcome == Outcome.CREATED

    fact("project-a", "subject-1", "due", 1)
    fact("project-b", "subject-2", "owner", 2)
    fact("project-c", "subject-3", "status", 3)
    fact("project-d", "subject-4", "room", 5)
    heads = {h.project: h for h in cas_floor.sample_floor_heads(agent.tenant_id, 10, 1)}
    target = heads.pop("project-c")
    # Three candidates: a pair whose ids happen to coincide with its revisions is passed over (see the next test).
    plan, attrs, used = cas_floor.make_plan(agent, sorted(heads.values(), key=lambda h: h.project), "t")
    assert len({h.project for h in used}) == 2 and target not in used
    cas_floor.replay_write(plan, cas_floor._fill_for(agent.tenant_id, attrs, target, "floor-value"))
    assert cas_floor.verify_floor(agent.tenant_id, [target]).startswith("1/1 ")
    new = MemoryRecord.objects.get(project__key="project-c", subject_id="subject-3", revision=4)
    assert (new.value, new.source_revision, new.is_head) == ("floor-value", "r4", True)
    assert AuditEvent.objects.filter(object_id=new.memory_id, action="record.asserted.created").exists()


def test_the_floor_refuses_a_pair_whose_attributes_coincide_in_both_writes():
    """Two captures whose project pks equal their new revisions (3 and 3, then 5 and 5) cannot tell which attribute
    a parameter is: the floor would replay a revision taken from the project's pk. Such a pair is never chosen."""
    from bench import cas_floor

    def head(pk: int, project_pk: int, n: int, revision: int) -> cas_floor.FloorHead:
        return cas_floor.FloorHead(
            pk, f"mem-{pk}", project_pk, f"proj-{n}", f"subj-{n}", f"p{n}", revision, "doc", "r1"
        )

    a, b, c = head(11, 3, 1, 2), head(12, 5, 2, 4), head(13, 5, 3, 7)
    assert cas_floor._ambiguous(a, b) and not cas_floor._ambiguous(a, c)
    with pytest.raises(cas_floor.TemplateError):
        cas_floor.make_plan(None, [a, b], "t")


@pytest.mark.parametrize("purged_rows", [False, True], ids=["new", "tombstoned"])
def test_a_new_fact_is_read_in_one_statement_with_its_next_revision(agent, purged_rows):
    """The fact's read returns its highest revision even when no live row matches, so a new fact sends no second
    statement. As a second MAX() of its own, that statement was planned through the field's index on a tenant
    importing into the table: 17-27 ms per new fact at 16,000 records of the predicate. A fact whose rows are all
    tombstoned (awaiting purge) still starts after its highest revision."""
    if purged_rows:
        for n in (1, 2):
            assert_fact(agent, deadline(f"v{n}", f"r{n}", at(10, n), expected_revision=n - 1 or None))
        MemoryRecord.objects.filter(subject_id=deadline("x", "r1", at(10, 1)).subject_id).update(
            tombstoned_at=at(10, 3), is_head=False, status=MemoryRecord.Status.DELETED
        )
    with CaptureQueriesContext(connection) as queries:
        result = assert_fact(agent, deadline("v-new", "r9", at(10, 20)))
    assert result.outcome == Outcome.CREATED and result.record.revision == (3 if purged_rows else 1)
    reads = [q["sql"] for q in queries.captured_queries if "max_revision" in q["sql"] or "MAX(" in q["sql"].upper()]
    assert len(reads) == 1, reads
    assert [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT MAX("memory_memoryrecord"')] == []
