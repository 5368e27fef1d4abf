"""Sealed source refs (issue 35, item 4): a record's `source_canonical_ref` and a recheck attempt's `source_ref` are
stored sealed under the fact's data key like its value; the ref's system stays in clear in `source_system`, so the
records page's source filter (memory.filters.source_condition) still finds what it found when refs were clear.
Both backends."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils.http import urlencode

from memory_admin.lib import sealing
from memory_admin.memory import filters, rechecks
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.filters import Door, RecordFilter
from memory_admin.memory.models import MemoryRecord, RecheckAttempt
from tests.support import at

SEALED_REFS = [
    "crm:contacts/alice@example.com",
    "crm:contacts/bob@example.com",
    "crm:deals/7",
    "crmx:1",
    "CRM:Upper",  # not a system name: no clear system
    "https://example.com/a",
    "no-colon-ref",
]
CLEAR_REFS = ["crm:contacts/carol@example.com", "legacy:zed"]  # written with SEALING off

PREFIXES = [
    "crm",
    "cr",
    "crm:",
    "crm:contacts/",
    "crm:contacts/b",
    "crm:contacts/carol",
    "crmx:",
    "CRM:U",
    "https://",
    "no-colon",
    "no",
    "legacy:z",
    "zzz",
    "crm:deals/7",
]


def _assert(agent, subject: str, ref: str, minute: int) -> MemoryRecord:
    return assert_fact(
        agent,
        Assertion(
            project_id="project-a",
            subject_id=subject,
            predicate="email",
            value=f"{subject}@example.com",
            valid_from=at(10, 20),
            source_canonical_ref=ref,
            source_revision="1",
        ),
        now=at(10, 20, 10, minute),
    ).record


def _stored_refs() -> dict[int, tuple[str, str]]:
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, source_canonical_ref, source_system FROM {table}")
        return {pk: (ref, system) for pk, ref, system in cursor.fetchall()}


@pytest.fixture
def refs(agent, settings) -> dict[str, MemoryRecord]:
    made = {}
    for n, ref in enumerate(SEALED_REFS):
        made[ref] = _assert(agent, f"sealed-{n}", ref, n)
    settings.SEALING_ENABLED = False
    for n, ref in enumerate(CLEAR_REFS):
        made[ref] = _assert(agent, f"clear-{n}", ref, 30 + n)
    settings.SEALING_ENABLED = True
    return made


def test_refs_are_stored_sealed_with_their_system_in_clear_and_read_plain(refs, agent):
    stored = _stored_refs()
    for ref, record in refs.items():
        text, system = stored[record.pk]
        assert system == sealing.system_of(ref)
        assert MemoryRecord.objects.get(pk=record.pk).source_canonical_ref == ref
        if ref in CLEAR_REFS:
            assert text == ref
        else:
            assert text.startswith(sealing.TEXT_MARK) and ref not in text
            assert sealing.open_text(text, "record.source_ref") == ref
    assert {sealing.system_of(r) for r in SEALED_REFS} == {"crm", "crmx", "https", ""}


def test_a_recheck_attempts_source_ref_is_sealed_under_the_records_key(refs, agent):
    record = refs["crm:contacts/alice@example.com"]
    attempt = rechecks.report_recheck(
        agent, record, outcome="source_unavailable", source_ref="crm:contacts/alice@example.com?v=2", error="timeout"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT source_ref FROM {RecheckAttempt._meta.db_table} WHERE id = %s", [attempt.pk])
        (text,) = cursor.fetchone()
    assert text.startswith(sealing.TEXT_MARK) and "alice" not in text
    assert RecheckAttempt.objects.get(pk=attempt.pk).source_ref == "crm:contacts/alice@example.com?v=2"
    # Bound to its column: the envelope does not open as a record's ref.
    with pytest.raises(sealing.KeyDestroyed):
        sealing.open_envelope(text[1:], "record.source_ref")


def _page_ids(client: Client, params: dict[str, str]) -> list[str]:
    response = client.get("/records/?" + urlencode({**params, "size": "200"}))
    assert response.status_code == 200
    assert not response.context["form"].errors
    return sorted(r.memory_id for r in response.context["rows"])


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_source_filter_finds_every_ref_that_starts_with_it_sealed_or_clear(prefix, refs, agent, owner):
    expected = sorted(r.memory_id for ref, r in refs.items() if ref.startswith(prefix))
    wanted = RecordFilter.from_params({"source": prefix, "status": "accepted"}, Door.PAGE)
    found = wanted.apply(MemoryRecord.objects.for_tenant(agent.tenant_pk), agent.tenant_pk)
    assert sorted(found.values_list("memory_id", flat=True)) == expected
    page = Client()
    page.force_login(owner)
    assert _page_ids(page, {"source": prefix, "status": "accepted"}) == expected


def test_the_filter_is_not_between_empty_lists(refs):
    assert sum(1 for p in PREFIXES if any(ref.startswith(p) for ref in refs)) >= 12


def test_refs_opened_past_their_system_are_matched_among_the_newest_candidates_only(refs, agent, monkeypatch):
    """The documented bound: a prefix longer than a system (and sealed refs without a system) is matched after
    opening, among the newest SEALED_SOURCE_SCAN sealed candidates; clear refs and whole systems are SQL."""
    # Newest first, the candidates for "crm:contacts/" are: no-colon-ref, CRM:Upper, crm:deals/7, bob, alice.
    monkeypatch.setattr(filters, "SEALED_SOURCE_SCAN", 4)
    found = RecordFilter(source="crm:contacts/").apply(
        MemoryRecord.objects.for_tenant(agent.tenant_pk), agent.tenant_pk
    )
    assert set(found) == {refs["crm:contacts/bob@example.com"], refs["crm:contacts/carol@example.com"]}
    # A whole system is decided in SQL, whatever the bound.
    found = RecordFilter(source="crm:").apply(MemoryRecord.objects.for_tenant(agent.tenant_pk), agent.tenant_pk)
    assert len(found) == 4


@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_systems_and_seals_existing_refs(as_db_owner, agent, settings):
    """Rows written before 0021 (refs in clear, no source_system column) get their system and a sealed ref;
    backwards, sealed refs are opened again into clear text."""
    settings.SEALING_ENABLED = False
    clear = _assert(agent, "legacy-1", "crm:contacts/dora@example.com", 1)
    odd = _assert(agent, "legacy-2", "Not A System:x", 2)
    attempt = rechecks.report_recheck(agent, clear, outcome="source_unavailable", source_ref="crm:contacts/dora")
    settings.SEALING_ENABLED = True
    sealed = _assert(agent, "legacy-3", "crm:contacts/erin@example.com", 3)
    assert _stored_refs()[sealed.pk][0].startswith(sealing.TEXT_MARK)
    before = [("memory", "0020_sealed_values")]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)  # backwards: 0021's refs opened, its column dropped
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, source_canonical_ref FROM {MemoryRecord._meta.db_table}")
            assert dict(cursor.fetchall())[sealed.pk] == "crm:contacts/erin@example.com"
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    stored = _stored_refs()
    assert stored[clear.pk][1] == "crm" and stored[odd.pk][1] == "" and stored[sealed.pk][1] == "crm"
    for record in (clear, odd, sealed):
        assert stored[record.pk][0].startswith(sealing.TEXT_MARK)
        assert MemoryRecord.objects.get(pk=record.pk).source_canonical_ref == record.source_canonical_ref
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT source_ref FROM {RecheckAttempt._meta.db_table} WHERE id = %s", [attempt.pk])
        assert cursor.fetchone()[0].startswith(sealing.TEXT_MARK)
    assert RecheckAttempt.objects.get(pk=attempt.pk).source_ref == "crm:contacts/dora"
    found = RecordFilter(source="crm:contacts/d").apply(
        MemoryRecord.objects.for_tenant(agent.tenant_pk), agent.tenant_pk
    )
    assert list(found) == [clear]
