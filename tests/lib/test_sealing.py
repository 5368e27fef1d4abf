"""Sealed values and their key store (lib.sealing, lib.keystore; issue 35, item 4)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings

from memory_admin.lib import keystore, sealing
from memory_admin.lib.keystore import Fact

FACT = Fact(1, 2, "person-1", "email")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "keys.sqlite3"
    monkeypatch.setenv("KEYSTORE_PATH", str(path))
    yield path
    keystore.reset_cache()


def test_a_value_seals_to_an_envelope_without_its_bytes_and_opens_again(store: Path) -> None:
    sealed = sealing.seal_json({"email": "alice@example.com"}, FACT, "record.value")
    assert "alice" not in json.dumps(sealed) and sealing.is_sealed(sealed)
    assert sealing.open_json(sealed, "record.value") == {"email": "alice@example.com"}
    text = sealing.seal_text("kept alice@example.com", FACT, "dispute.resolution_reason")
    assert "alice" not in text and sealing.open_text(text, "dispute.resolution_reason") == "kept alice@example.com"
    # Two seals of one value differ (a fresh nonce each), under the one key of the fact.
    again = sealing.seal_json({"email": "alice@example.com"}, FACT, "record.value")
    assert again != sealed and again["$sealed"].split(".")[2] == sealed["$sealed"].split(".")[2]


def test_an_envelope_moved_to_another_column_or_tenant_or_altered_does_not_open(store: Path) -> None:
    envelope = sealing.seal_json("alice@example.com", FACT, "record.value")["$sealed"]
    with pytest.raises(sealing.KeyDestroyed, match="does not open"):
        sealing.open_envelope(envelope, "dispute.resolution_reason")
    version, tenant, key_id, body = envelope.split(".")
    with pytest.raises(sealing.KeyDestroyed):
        sealing.open_envelope(".".join([version, "99", key_id, body]), "record.value")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    with pytest.raises(sealing.KeyDestroyed):
        sealing.open_envelope(".".join([version, tenant, key_id, flipped]), "record.value")
    with pytest.raises(sealing.KeyDestroyed, match="not a sealed envelope"):
        sealing.open_envelope("plain text", "record.value")


def test_a_destroyed_key_reads_as_erased_and_leaves_no_byte_in_the_store(store: Path) -> None:
    sealed = sealing.seal_json("alice@example.com", FACT, "record.value")
    text = sealing.seal_text("kept alice@example.com", FACT, "audit.reason")
    other = sealing.seal_json("bob@example.com", Fact(1, 2, "person-2", "email"), "record.value")
    key_id = sealed["$sealed"].split(".")[2]
    wrapped = keystore._connect().execute("SELECT wrapped FROM data_key WHERE key_id = ?", (key_id,)).fetchone()[0]
    assert bytes(wrapped) in store.read_bytes()

    selection = keystore.Selection(1, 2, subject_id="person-1")
    assert keystore.key_ids(selection) == [key_id]
    assert keystore.retire([key_id]) == 1
    assert sealing.open_json(sealed, "record.value") == "alice@example.com"  # retired keys still open
    assert keystore.key_for(FACT)[0] != key_id  # a later value of the fact gets a new key
    assert keystore.destroy_ids([key_id]) == 1

    assert sealing.open_json(sealed, "record.value") == sealing.ERASED_VALUE
    assert sealing.open_text(text, "audit.reason") == sealing.ERASED_TEXT
    assert sealing.open_json(other, "record.value") == "bob@example.com"
    with pytest.raises(sealing.KeyDestroyed, match="destroyed"):
        sealing.open_envelope(sealed["$sealed"], "record.value")
    # secure_delete and VACUUM: the wrapped key's bytes are in no page of the file, and no journal is left.
    assert bytes(wrapped) not in store.read_bytes()
    assert not store.with_name("keys.sqlite3-journal").exists() and not store.with_name("keys.sqlite3-wal").exists()
    assert keystore.describe() == {
        "kind": "sqlite",
        "journal_mode": "delete",
        "secure_delete": True,
        "separate_from_database": True,
    }


def test_the_key_store_holds_no_identifier_in_clear(store: Path) -> None:
    sealing.seal_json("x", Fact(1, 2, "person-with-a-name", "home_address"), "record.value")
    raw = store.read_bytes()
    assert b"person-with-a-name" not in raw and b"home_address" not in raw


@pytest.mark.django_db
def test_records_are_stored_sealed_and_read_plain_and_erased_once_the_key_is_gone(store: Path, agent, api) -> None:
    from memory_admin.memory.models import AuditEvent, MemoryRecord

    body = {
        "project_id": "project-a",
        "subject_id": "person-1",
        "predicate": "email",
        "value": "alice@example.com",
        "valid_from": "2026-10-01T00:00:00Z",
        "source": {"canonical_ref": "crm:1", "revision": "1"},
    }
    created = api(agent).post("/api/v1/records/", body, format="json")
    assert created.status_code == 201, created.content
    memory_id = created.json()["memory_id"]
    record = MemoryRecord.objects.get(memory_id=memory_id)
    assert record.value == "alice@example.com"
    with connection.cursor() as cursor:
        cursor.execute("SELECT CAST(value AS TEXT) FROM memory_memoryrecord WHERE id = %s", [record.pk])
        stored = cursor.fetchone()[0]
        cursor.execute("SELECT CAST(after AS TEXT) FROM memory_auditevent WHERE object_id = %s", [memory_id])
        snapshot = cursor.fetchone()[0]
    assert "alice" not in stored and "alice" not in snapshot
    assert AuditEvent.objects.get(object_id=memory_id).after["value"] == "alice@example.com"

    keystore.destroy(keystore.Selection(record.tenant_id, record.project_id, subject_id="person-1"))
    answer = api(agent).get(f"/api/v1/records/{memory_id}/")
    assert answer.status_code == 200 and answer.json()["value"] == sealing.ERASED_VALUE
    assert AuditEvent.objects.get(object_id=memory_id).after["value"] == sealing.ERASED_VALUE


@pytest.mark.django_db
def test_with_sealing_off_values_are_stored_in_clear_and_still_read(store: Path, agent, api) -> None:
    from memory_admin.memory.models import MemoryRecord

    body = {
        "project_id": "project-a",
        "subject_id": "person-2",
        "predicate": "email",
        "value": "carol@example.com",
        "valid_from": "2026-10-01T00:00:00Z",
        "source": {"canonical_ref": "crm:2", "revision": "1"},
    }
    with override_settings(SEALING_ENABLED=False):
        memory_id = api(agent).post("/api/v1/records/", body, format="json").json()["memory_id"]
    record = MemoryRecord.objects.get(memory_id=memory_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT CAST(value AS TEXT) FROM memory_memoryrecord WHERE id = %s", [record.pk])
        assert "carol@example.com" in cursor.fetchone()[0]
    assert record.value == "carol@example.com"


@pytest.mark.django_db
def test_seal_values_seals_rows_written_in_clear_and_leaves_sealed_ones(store: Path, agent, api) -> None:
    from io import StringIO

    from django.core.management import call_command

    from memory_admin.memory.models import MemoryRecord

    def post(subject: str) -> str:
        body = {
            "project_id": "project-a",
            "subject_id": subject,
            "predicate": "email",
            "value": f"{subject}@example.com",
            "valid_from": "2026-10-01T00:00:00Z",
            "source": {"canonical_ref": "crm:3", "revision": "1"},
        }
        return str(api(agent).post("/api/v1/records/", body, format="json").json()["memory_id"])

    with override_settings(SEALING_ENABLED=False):
        clear = post("dora")
    sealed = post("erin")

    def stored(memory_id: str) -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT CAST(value AS TEXT) FROM memory_memoryrecord WHERE memory_id = %s", [memory_id])
            return str(cursor.fetchone()[0])

    before_sealed = stored(sealed)
    out = StringIO()
    call_command("seal_values", "--dry-run", stdout=out)
    assert "memory_memoryrecord: 1 in clear" in out.getvalue()
    call_command("seal_values", stdout=out)
    assert "dora@example.com" not in stored(clear) and stored(sealed) == before_sealed
    assert MemoryRecord.objects.get(memory_id=clear).value == "dora@example.com"
    out = StringIO()
    call_command("seal_values", "--dry-run", stdout=out)
    assert "memory_memoryrecord: 0 in clear" in out.getvalue()
