"""lib.rows builds instances without Django's per-field constructor calls, and sends a JSON column as one JSON
array: each stands in for what Django does only where it gives the same result, which these tests compare."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, models
from django.db.models.signals import post_init, pre_init

from memory_admin.lib import rows
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditEvent, MemoryRecord, Project, RecheckAttempt
from tests.support import at, deadline

# JSON that means something to PostgreSQL's array and JSON syntax, or to NULLIF: quotes, backslashes, the text
# "null", JSON null inside a container, an empty object, unicode, a JSON document held as a string.
AWKWARD_JSON: list[Any] = [
    {"quote": 'say "hi"', "back": "\\", "nested": {"list": [1, None, "null", {"": []}]}},
    "null",
    '{"looks": "like json"}',
    [None],
    {},
    [],
    "ünïcødé ✓ 日本",
    1.5,
    -0.0,
    10**17,
    True,
]


def _constructed(model: type[models.Model], values: list[Any]) -> models.Model:
    """Django's own constructor, given every field's value by position (as Model.from_db does)."""
    return model(*values)


def _values(instance: Any) -> dict[str, Any]:
    return {k: v for k, v in instance.__dict__.items() if k != "_state"}


def _record_values(agent: Any) -> list[Any]:
    project = Project.objects.create(tenant_id=agent.tenant_id, key="p")
    made = MemoryRecord(
        tenant_id=agent.tenant_id,
        project=project,
        subject_id="s",
        predicate="due",
        value={"a": [1, "x"]},
        valid_from=at(10, 1),
        recorded_from=at(10, 1, 9),
        revision=1,
        source_canonical_ref="crm:1",
        source_revision="r1",
        issuer=agent,
    )
    return [getattr(made, f.attname) for f in MemoryRecord._meta.concrete_fields]


@pytest.mark.django_db
def test_an_instance_built_without_the_constructor_is_the_one_the_constructor_builds(agent):
    for model, values in (
        (MemoryRecord, _record_values(agent)),
        (
            AuditEvent,
            # ... redacted_at, then the chain's prev_hash, hash, nonce and three commitments (memory.audit_chain).
            [
                *(None, agent.tenant_id, at(10, 2), agent.pk, "a", "x", "record", "m", None, {"k": 1}, "", None),
                *("0" * 64, "1" * 64, "2" * 32, "3" * 64, "4" * 64, "5" * 64),
            ],
        ),
    ):
        assert len(values) == len(model._meta.concrete_fields)
        fast, slow = rows._instance(model, values), _constructed(model, values)
        assert type(fast) is model
        assert _values(fast) == _values(slow)
        assert list(_values(fast)) == list(_values(slow))  # the same attributes, in the same order
        assert fast._state.adding and fast._state.db is None
        with pytest.raises(TypeError, match="takes"):
            rows._instance(model, values[:-1])


@pytest.mark.django_db
def test_a_listener_on_the_init_signals_gets_djangos_own_constructor(agent):
    values = _record_values(agent)
    heard: list[str] = []

    def before(sender: Any, **kwargs: Any) -> None:
        heard.append("pre")

    def after(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append("post")

    rows._instance(MemoryRecord, values)
    assert heard == []
    for signal, receiver in ((pre_init, before), (post_init, after)):
        signal.connect(receiver, sender=MemoryRecord)
        try:
            built = rows._instance(MemoryRecord, values)
        finally:
            signal.disconnect(receiver, sender=MemoryRecord)
        assert _values(built) == _values(_constructed(MemoryRecord, values))
    assert heard == ["pre", "post"]


@pytest.mark.django_db
def test_a_loaded_row_is_the_instance_a_queryset_gives(agent):
    made = assert_fact(agent, deadline({"n": 1}, "r1", at(10, 1))).record
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.select_list(MemoryRecord, 'r')} FROM memory_memoryrecord r WHERE r.id = %s", [made.pk]
        )
        loaded = rows.load(MemoryRecord, cursor.fetchone())
    queried = MemoryRecord.all_objects.get(pk=made.pk)
    assert _values(loaded) == _values(queried)
    assert not loaded._state.adding and loaded._state.db == queried._state.db == connection.alias


CHAIN_COLUMNS = ("prev_hash", "hash", "nonce", "before_commitment", "after_commitment", "reason_commitment")


@pytest.mark.postgres_only(reason="lib.rows's INSERT ... SELECT FROM ROWS FROM (...), PostgreSQL's set-based insert")
def test_json_columns_sent_as_one_array_store_what_the_orm_stores(agent):
    n = len(AWKWARD_JSON)
    rows.insert_columns(
        AuditEvent,
        {
            "tenant_id": [agent.tenant_id] * n,
            "at": [datetime(2026, 10, 2, tzinfo=UTC)] * n,
            "actor_name": ["rows"] * n,
            "action": ["a"] * n,
            "object_type": ["record"] * n,
            "object_id": [f"m-{i}" for i in range(n)],
            "before": [None if i % 2 else v for i, v in enumerate(AWKWARD_JSON)],
            "after": AWKWARD_JSON,
            "reason": [""] * n,
            # Written outside the audit writer, so unchained: the chain's columns have no database default.
            **{name: [""] * n for name in CHAIN_COLUMNS},
        },
    )
    for i, value in enumerate(AWKWARD_JSON):
        AuditEvent.objects.create(
            tenant_id=agent.tenant_id,
            at=datetime(2026, 10, 2, tzinfo=UTC),
            actor_name="orm",
            action="a",
            object_type="record",
            object_id=f"m-{i}",
            before=None if i % 2 else value,
            after=value,
        )
    with connection.cursor() as cursor:
        # Compared as stored: the jsonb values, and SQL NULL where the ORM writes SQL NULL (not JSON null).
        cursor.execute(
            "SELECT object_id, actor_name, before::text, before IS NULL, after::text FROM memory_auditevent "
            "WHERE actor_name IN ('rows', 'orm') ORDER BY object_id, actor_name"
        )
        stored: dict[str, dict[str, tuple[Any, ...]]] = {}
        for object_id, actor, *columns in cursor.fetchall():
            stored.setdefault(object_id, {})[actor] = tuple(columns)
    assert len(stored) == n
    for object_id, by_writer in stored.items():
        assert by_writer["rows"] == by_writer["orm"], object_id
    assert stored["m-1"]["rows"][1] is True and stored["m-1"]["rows"][2] == '"null"'
    loaded = {e.object_id: e.after for e in AuditEvent.objects.filter(actor_name="rows")}
    assert [loaded[f"m-{i}"] for i in range(n)] == AWKWARD_JSON


@pytest.mark.postgres_only(reason="lib.rows's UPDATE ... FROM ROWS FROM (...), PostgreSQL's set-based update")
def test_json_columns_updated_as_one_array_store_each_rows_own_value(agent):
    record = assert_fact(agent, deadline({"n": 1}, "r1", at(10, 1))).record
    attempts = [
        RecheckAttempt.objects.create(
            tenant_id=agent.tenant_id, record=record, outcome="not_checked", trigger="manual", observed_value={"x": i}
        )
        for i in range(len(AWKWARD_JSON))
    ]
    for i, (attempt, value) in enumerate(zip(attempts, AWKWARD_JSON, strict=True)):
        attempt.observed_value = None if i % 3 == 0 else value
        attempt.source_revision = f"r{i}"
    assert rows.update_objects(attempts, ["observed_value", "source_revision"]) == len(attempts)
    for i, attempt in enumerate(attempts):
        again = RecheckAttempt.objects.get(pk=attempt.pk)
        assert again.observed_value == (None if i % 3 == 0 else AWKWARD_JSON[i]) and again.source_revision == f"r{i}"
    with connection.cursor() as cursor:  # SQL NULL, as the ORM writes None, not JSON null
        cursor.execute(
            "SELECT count(*) FROM memory_recheckattempt WHERE record_id = %s AND observed_value IS NULL", [record.pk]
        )
        assert cursor.fetchone()[0] == len(range(0, len(attempts), 3))


@pytest.mark.django_db
def test_a_queryset_builds_records_as_djangos_from_db_would(agent):
    """MemoryRecord.from_db is lib.rows.from_db: a full row gives the instance Django's from_db gives; a row with
    deferred fields, and any model with an init listener, go through Django's own."""
    made = assert_fact(agent, deadline({"n": 1}, "r1", at(10, 1))).record
    queried = MemoryRecord.all_objects.select_related("project").get(pk=made.pk)
    fields = MemoryRecord._meta.concrete_fields
    djangos = models.Model.from_db.__func__(  # type: ignore[attr-defined]
        MemoryRecord, connection.alias, [f.attname for f in fields], [getattr(queried, f.attname) for f in fields]
    )
    assert type(queried) is MemoryRecord and _values(queried) == _values(djangos)
    assert not queried._state.adding and queried._state.db == djangos._state.db == connection.alias
    assert queried.project.key == "project-a" and queried == djangos

    partial = MemoryRecord.all_objects.only("memory_id", "subject_id", "project").get(pk=made.pk)
    loaded = [f.attname for f in fields if f.attname in {"id", "memory_id", "subject_id", "project_id"}]
    djangos_partial = models.Model.from_db.__func__(  # type: ignore[attr-defined]
        MemoryRecord, connection.alias, loaded, [getattr(partial, a) for a in loaded]
    )
    assert _values(partial) == _values(djangos_partial) and set(_values(partial)) == set(loaded)
    assert (
        partial.get_deferred_fields() == djangos_partial.get_deferred_fields()
        and "value" in partial.get_deferred_fields()
    )
    assert partial.value == {"n": 1}  # loaded on access, as Django does

    heard: list[str] = []

    def after(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append(instance.memory_id)

    post_init.connect(after, sender=MemoryRecord)
    try:
        MemoryRecord.all_objects.get(pk=made.pk)
    finally:
        post_init.disconnect(after, sender=MemoryRecord)
    assert heard == [made.memory_id]
