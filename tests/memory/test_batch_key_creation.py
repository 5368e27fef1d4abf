"""A batch's new facts get their data keys (crypto-shredding, lib.keystore) in one commit of the key store, not
one durable commit per fact; keys that exist are kept; and the batch's values open under the keys it created."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from django.db import connection

from memory_admin.lib import keystore, sealing
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.batch import assert_facts
from memory_admin.memory.models import MemoryRecord
from tests.support import at


@contextmanager
def key_store_statements() -> Iterator[list[str]]:
    """The SQL the key store's connection runs inside the block (sqlite3's trace callback)."""
    seen: list[str] = []
    connection = keystore._connect()
    connection.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        connection.set_trace_callback(None)


def _assertion(subject: str, value: str = "v1") -> Assertion:
    return Assertion(
        project_id="project-keys",
        subject_id=subject,
        predicate="email",
        value=value,
        valid_from=at(10, 20),
        source_canonical_ref=f"crm:contacts/{subject}",
        source_revision="r1",
    )


def _inserts(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().upper().startswith("INSERT")]


def _commits(statements: list[str]) -> list[str]:
    return [s for s in statements if s.strip().upper() == "COMMIT"]


def test_ensure_keys_creates_the_missing_keys_in_one_commit_and_keeps_existing_ones(agent):
    # The key store is a file of its own, outside the test database's rollback: subjects new to it each run.
    run = uuid.uuid4().hex
    facts = [keystore.Fact(agent.require_tenant.pk, 1, f"subject-{run}-{n}", "email") for n in range(40)]
    kept_id, kept_key = keystore.key_for(facts[0])
    with key_store_statements() as statements:
        created = keystore.ensure_keys(facts)
    assert created == 39
    assert len(_commits(statements)) == 1
    assert sum(1 for s in statements if s.strip().upper() == "BEGIN IMMEDIATE") == 1
    assert keystore.key_for(facts[0]) == (kept_id, kept_key)
    with key_store_statements() as statements:
        ids = {keystore.key_for(fact)[0] for fact in facts}
    assert len(ids) == 40 and not _inserts(statements)  # every key was there: key_for only reads
    assert keystore.ensure_keys(facts) == 0


def test_a_batch_of_new_facts_creates_their_keys_in_one_commit(agent):
    run = uuid.uuid4().hex[:12]
    items = [_assertion(f"person-{run}-{n}", f"person-{n}@example.com") for n in range(25)]
    with key_store_statements() as statements:
        result = assert_facts(agent, items)
    assert all(item.error is None for item in result.items), [item.error for item in result.items]
    assert len(_commits(statements)) == 1
    # No key made outside that transaction (an autocommitted INSERT per fact is what this replaces).
    begin = next(i for i, s in enumerate(statements) if s.strip().upper() == "BEGIN IMMEDIATE")
    end = next(i for i, s in enumerate(statements) if s.strip().upper() == "COMMIT")
    assert all(begin < i < end for i, s in enumerate(statements) if s in _inserts(statements))
    records = {r.subject_id: r for r in MemoryRecord.objects.filter(subject_id__startswith=f"person-{run}-")}
    assert len(records) == 25
    for n in range(25):
        record = records[f"person-{run}-{n}"]
        assert record.value == f"person-{n}@example.com"
        assert record.source_canonical_ref == f"crm:contacts/person-{run}-{n}"


def test_a_later_single_write_uses_the_key_the_batch_created(agent):
    solo = f"solo-{uuid.uuid4().hex[:12]}"
    assert_facts(agent, [_assertion(solo)])
    record = MemoryRecord.objects.get(subject_id=solo)
    with key_store_statements() as statements:
        later = assert_fact(agent, replace(_assertion(solo, "new@example.com"), expected_revision=1)).record
    assert not _inserts(statements)
    assert _stored_key_id(later.pk) == _stored_key_id(record.pk)


def _stored_key_id(pk: int) -> str:
    """The key id in the record's value as the row holds it (sealed), read past the field's opening."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT value FROM {MemoryRecord._meta.db_table} WHERE id = %s", [pk])
        (stored,) = cursor.fetchone()
    stored = json.loads(stored) if isinstance(stored, str) else stored
    return sealing.envelope_key_id(stored[sealing.JSON_MARK])
