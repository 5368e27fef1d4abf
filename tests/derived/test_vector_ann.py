"""The ANN index (IVF_SQ by default, IVF_PQ on request) of the vector store and the scalar indexes of its
filter columns: built by a task past a size, searched with the same filter semantics as the exact scan,
and physically removed with a deleted subject's rows.

The threshold and partitions are set low so a few hundred rows make an index (PQ needs 256 rows to
train its code books).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from django.test import override_settings

from deletion.stores.base import Job
from deletion.stores.embeddings import EmbeddingsStore
from memory_admin.derived import tasks
from memory_admin.derived.embedding import HashingEmbedder
from memory_admin.derived.vectors import (
    FILTER_INDEXES,
    VectorEntry,
    VectorIndex,
    clear_index_cache,
    get_index,
    where_objects,
)

DIM = 256
WORDS = (
    "invoice shipping deadline password office meeting contract renewal budget travel visa laptop "
    "printer payroll holiday badge parking lunch training audit release server backup customer"
).split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(6))


def entry(object_id: str, text: str, *, tenant_id: int = 1, usable: bool = True, kind: str = "record") -> VectorEntry:
    return VectorEntry(
        entry_id=f"{kind}:{object_id}",
        tenant_id=tenant_id,
        project_id="alpha",
        kind=kind,
        object_id=object_id,
        revision=1,
        text=text,
        usable=usable,
    )


def fill(
    index: VectorIndex, count: int, *, tenant_id: int = 1, prefix: str = "mem", seed: int = 7
) -> list[VectorEntry]:
    rng = random.Random(seed)
    entries = [entry(f"{prefix}-{i:05d}", sentence(rng), tenant_id=tenant_id) for i in range(count)]
    index.upsert(entries)
    return entries


@pytest.fixture
def index(tmp_path: Path) -> VectorIndex:
    return VectorIndex(tmp_path / "vectors", embedder=HashingEmbedder(DIM))


def vector_bytes(index: VectorIndex, text: str) -> bytes:
    return np.asarray(index.embedder.embed([text])[0], dtype=np.float32).tobytes()


# --- search with the index ------------------------------------------------------------------------


def test_search_through_the_index_keeps_the_filters_and_exact_scores(index: VectorIndex) -> None:
    fill(index, 600)
    small = [entry(f"small-{i}", f"invoice shipping deadline {i}", tenant_id=2) for i in range(4)]
    held = entry("held", "invoice shipping deadline contract", usable=False)
    summary = entry("sum-1", "invoice shipping deadline summary", kind="summary")
    index.upsert([*small, held, summary])
    assert index.ann_index() is None
    info = index.build_ann_index(num_partitions=4)
    assert info["indexed_rows"] == index.count() == 606 and info["unindexed_rows"] == 0
    assert info["index_type"] == "IvfSq"  # the default type
    assert index.filter_indexes() == sorted(column for column, _ in FILTER_INDEXES)

    # A small tenant in a large table gets all its rows and nothing else (prefilter, probes uncapped).
    hits = index.search(tenant_id=2, project_id=None, text="invoice shipping deadline", k=10)
    assert sorted(h.object_id for h in hits) == sorted(e.object_id for e in small)
    # The usable flag and the kind filter apply as without the index.
    ids = {h.object_id for h in index.search(tenant_id=1, project_id=None, text="invoice shipping", k=50)}
    assert "held" not in ids and "sum-1" in ids
    records = index.search(tenant_id=1, project_id=None, text="invoice shipping", k=50, kind="record")
    assert "sum-1" not in {h.object_id for h in records} and "held" not in {h.object_id for h in records}
    assert {(h.kind, h.usable) for h in records} == {("record", True)}  # the columns the filter fixed
    everything = index.search(tenant_id=1, project_id=None, text="shipping", k=700, usable_only=False)
    by_id = {h.object_id: h for h in everything}
    assert not by_id["held"].usable and by_id["sum-1"].kind == "summary" and by_id["mem-00000"].usable
    assert by_id["mem-00000"].kind == "record"
    # Probing every partition, the index finds the exact top k; refined scores are exact cosines.
    rng = random.Random(3)
    for _ in range(5):
        query = sentence(rng)
        vector = index.embedder.embed([query])[0]
        ann = index.search_vector(vector, tenant_id=1, project_id="alpha", k=10, nprobes=4, refine_factor=10)
        exact = index.search_vector(vector, tenant_id=1, project_id="alpha", k=10, exact=True)
        assert [round(h.score, 4) for h in ann] == [round(h.score, 4) for h in exact]
        entries = {e.object_id: e for e in index.find(tenant_id=1, object_ids=[h.object_id for h in ann])}
        for hit in ann:
            stored = index.embedder.embed([entries[hit.object_id].text])[0]
            assert hit.score == pytest.approx(float(np.dot(vector, stored)), abs=1e-4)


def test_a_narrow_filter_searches_past_the_probed_partitions(index: VectorIndex) -> None:
    """A small tenant's rows are spread over partitions the query's nearest one does not hold: the first
    search (one partition) comes back short of k, and the widened one finds all of them."""
    fill(index, 800)
    rng = random.Random(11)
    small = [entry(f"tiny-{i}", sentence(rng), tenant_id=3) for i in range(6)]
    index.upsert(small)
    index.compact_and_cleanup(rebuild_ann=False)
    index.build_ann_index(num_partitions=16)
    query = index.embedder.embed(["payroll holiday badge"])[0]
    hits = index.search_vector(query, tenant_id=3, project_id=None, k=10, nprobes=1, refine_factor=1)
    assert sorted(h.object_id for h in hits) == sorted(e.object_id for e in small)
    exact = index.search_vector(query, tenant_id=3, project_id=None, k=10, exact=True)
    assert [h.object_id for h in hits] == [h.object_id for h in exact]
    # With enough rows in the probed partitions, k come back and they belong to the filter.
    big = index.search_vector(query, tenant_id=1, project_id=None, k=10, nprobes=1, refine_factor=1)
    assert len(big) == 10 and all(h.object_id.startswith("mem-") for h in big)


def test_the_pq_variant_is_built_on_request(index: VectorIndex) -> None:
    fill(index, 400)
    info = index.build_ann_index(num_partitions=2, index_type="IVF_PQ", num_sub_vectors=16)
    assert info["index_type"] == "IvfPq" and info["indexed_rows"] == 400
    text = "invoice shipping deadline password office meeting"
    hits = index.search(tenant_id=1, project_id=None, text=text, k=5)
    exact = index.search_vector(index.embedder.embed([text])[0], tenant_id=1, project_id=None, k=5, exact=True)
    assert [round(h.score, 4) for h in hits] == [round(h.score, 4) for h in exact]
    with pytest.raises(ValueError, match="unknown ANN index type"):
        index.build_ann_index(index_type="HNSW")
    with override_settings(VECTOR_ANN_INDEX_TYPE="IVF_PQ"):
        assert index.build_ann_index(num_partitions=2)["index_type"] == "IvfPq"


def test_an_index_without_filter_indexes_is_due_and_the_update_adds_them(index: VectorIndex) -> None:
    fill(index, 300)
    index.build_ann_index(num_partitions=2)
    table = index._open_table()
    for column, _ in FILTER_INDEXES[:2]:
        table.drop_index(f"{column}_idx")
    assert len(index.filter_indexes()) == len(FILTER_INDEXES) - 2
    assert index.needs_ann_index(min_rows=1)  # an ANN index built before the scalar ones existed
    info = index.update_ann_index()
    assert info is not None and index.filter_indexes() == sorted(column for column, _ in FILTER_INDEXES)
    assert not index.needs_ann_index(min_rows=1)


def test_rows_added_after_the_build_are_found_and_then_indexed(index: VectorIndex) -> None:
    fill(index, 400)
    index.build_ann_index(num_partitions=2)
    index.upsert([entry("late", "quarterly visa renewal for the berlin office")])
    hits = index.search(tenant_id=1, project_id=None, text="quarterly visa renewal berlin office", k=1)
    assert [h.object_id for h in hits] == ["late"]  # unindexed rows are scanned and merged in
    assert index.ann_index()["unindexed_rows"] == 1  # type: ignore[index]
    info = index.update_ann_index()
    assert info is not None and info["unindexed_rows"] == 0 and info["indexed_rows"] == 401
    # The scalar indexes took the new row in too: filtering on them finds it.
    table = index._open_table()
    stats = {column: table.index_stats(f"{column}_idx") for column, _ in FILTER_INDEXES}
    assert all(stat is not None and stat.num_unindexed_rows == 0 for stat in stats.values()), stats
    assert [e.object_id for e in index.find(tenant_id=1, object_ids=["late"])] == ["late"]


# --- the build task -------------------------------------------------------------------------------


@pytest.fixture
def settings_index(tmp_path: Path) -> Any:
    with override_settings(
        VECTOR_INDEX_PATH=str(tmp_path / "shared"), VECTOR_ANN_MIN_ROWS=300, VECTOR_ANN_PARTITIONS=2
    ):
        clear_index_cache()
        tasks._ann_checked_at.clear()
        yield get_index()
    clear_index_cache()
    tasks._ann_checked_at.clear()


def test_the_task_builds_the_index_once_the_table_passes_the_threshold(settings_index: VectorIndex) -> None:
    index = settings_index
    fill(index, 299)
    assert not index.needs_ann_index()
    assert tasks.build_vector_ann_index() is None and index.ann_index() is None
    fill(index, 1, prefix="more")
    assert index.needs_ann_index()
    with index.ann_build_lock() as acquired:  # another build in progress: this run does nothing
        assert acquired
        assert tasks.build_vector_ann_index() is None
    built = tasks.build_vector_ann_index()
    assert built is not None and built["indexed_rows"] == 300 and index.ann_index() is not None
    assert not index.needs_ann_index()
    assert tasks.build_vector_ann_index() is None  # idempotent


def test_refreshes_queue_the_build_when_due_at_most_every_few_minutes(settings_index: VectorIndex, monkeypatch) -> None:
    queued: list[int] = []
    monkeypatch.setattr(tasks.build_vector_ann_index, "delay", lambda *a, **k: queued.append(1))
    index = settings_index
    fill(index, 100)
    assert not tasks.queue_ann_index_build_if_due(index, now=0.0)  # below the threshold
    fill(index, 250, prefix="more")
    assert not tasks.queue_ann_index_build_if_due(index, now=10.0)  # checked 10 s ago: throttled
    assert tasks.queue_ann_index_build_if_due(index, now=tasks.ANN_CHECK_SECONDS + 1)
    assert queued == [1]
    index.build_ann_index()
    assert not tasks.queue_ann_index_build_if_due(index, now=3 * tasks.ANN_CHECK_SECONDS)  # built
    assert queued == [1]


# --- deletion: data files and index files ---------------------------------------------------------


def test_deleted_rows_leave_no_data_or_index_file_behind(index: VectorIndex) -> None:
    entries = fill(index, 599)
    victim = entry("victim-1", "the secret rendezvous code is ZX-9917 at the harbour")
    index.upsert([victim])
    index.compact_and_cleanup(rebuild_ann=False)  # one fragment: a few deleted rows won't trigger a rewrite
    before = index.build_ann_index(num_partitions=4)
    needle = vector_bytes(index, victim.text)
    assert index.files_contain(needle) and index.files_contain("ZX-9917")  # the check can see them
    old_index_dir = index.path / "entries.lance" / "_indices" / before["uuid"]
    assert old_index_dir.is_dir()

    where = where_objects(1, ["victim-1"])
    assert index.delete_where_object(1, ["victim-1"]) == 1
    assert index.rows_in_any_version(where) >= 1  # an old version still holds it
    stats = index.compact_and_cleanup()

    assert stats["versions_after"] == 1 and stats["rows_rewritten"] == 599 and stats["ann_index_rebuilt"]
    assert index.rows_in_any_version(where) == 0
    assert not index.files_contain(needle)  # no data file (and no index file) holds the vector
    assert not index.files_contain("ZX-9917") and not index.files_contain("victim-1")
    disk = index.disk_check()
    assert disk["versions"] == 1 and disk["deletion_files"] == 0 and disk["unreferenced_index_dirs"] == []
    after = disk["ann_index"]
    assert after is not None and after["uuid"] != before["uuid"] and not old_index_dir.exists()
    assert index.filter_indexes() == sorted(column for column, _ in FILTER_INDEXES)  # rebuilt with it
    assert disk["index_dirs"] == 1 + len(FILTER_INDEXES)
    assert after["indexed_rows"] == 599 and after["created_at"] > before["created_at"]
    # The other rows are still found through the rebuilt index.
    hits = index.search(tenant_id=1, project_id=None, text=entries[0].text, k=1)
    assert hits and hits[0].score == pytest.approx(1.0, abs=1e-4)


def test_without_the_rewrite_a_deleted_vector_stays_in_the_data_file(index: VectorIndex) -> None:
    """Why `compact_and_cleanup` rewrites fragments: compaction alone keeps a few deleted rows on disk."""
    fill(index, 300)
    victim = entry("victim-2", "a value that must not survive its deletion QK-1204")
    index.upsert([victim])
    index.compact_and_cleanup(rebuild_ann=False)
    index.delete_where_object(1, ["victim-2"])
    table = index._open_table()
    index._optimize_all(table)  # compaction and cleanup only
    assert index.rows_in_any_version(where_objects(1, ["victim-2"])) == 0  # invisible to every version...
    assert index.files_contain(vector_bytes(index, victim.text))  # ...yet still in a data file
    assert index.disk_check()["deletion_files"] == 1
    assert index.compact_and_cleanup()["rows_rewritten"] == 300
    assert not index.files_contain(vector_bytes(index, victim.text))


def test_the_embeddings_store_verifies_index_files(settings_index: VectorIndex) -> None:
    index = settings_index
    fill(index, 400)
    index.upsert([entry("gone-1", "delete me please MX-5521"), entry("gone-2", "and me too MX-5522")])
    index.compact_and_cleanup(rebuild_ann=False)
    index.build_ann_index()
    store = EmbeddingsStore()
    job = Job(
        tenant_id=1,
        request_public_id="del-test",
        project_id=1,
        project_key="alpha",
        targets={"object_ids": ["gone-1", "gone-2"]},
    )
    # Before any purge: the rows are there, and an index built before "now" would be stale.
    early = store.verify(Job(**{**job.__dict__, "evidence": {"deleted_at": "2999-01-01T00:00:00+00:00"}}))
    assert early.evidence["rows_in_any_version"] >= 2 and early.evidence["ann_index_built_before_deletion"]
    assert early.remaining == early.evidence["rows_in_any_version"] + 1
    assert store.purge(job) == 2
    verification = store.verify(job)
    assert verification.remaining == 0, verification.evidence
    evidence = verification.evidence
    assert evidence["versions"] == 1 and evidence["unreferenced_index_dirs"] == 0
    assert evidence["deletion_files"] == 0 and evidence["compaction"]["ann_index_rebuilt"]
    assert not index.files_contain("MX-5521") and not index.files_contain(vector_bytes(index, "and me too MX-5522"))
    # A stray index folder (a crashed build, an uncleaned old version) is counted.
    stray = index.path / "entries.lance" / "_indices" / "00000000-0000-0000-0000-000000000000"
    stray.mkdir()
    assert store.verify(job).remaining == 1


def test_bulk_add_refuses_a_foreign_schema(index: VectorIndex) -> None:
    bad = pa.table({"entry_id": ["x"], "vector": [[0.0] * 3]})
    with pytest.raises((ValueError, pa.ArrowInvalid, KeyError)):
        index.bulk_add(bad)


# --- retrieval through the index, with the database deciding ---------------------------------------


@pytest.mark.django_db
def test_agent_search_through_the_index_keeps_governance_and_tenants(
    settings_index: VectorIndex, moved_deadline: Any, agent: Any, outsider: Any
) -> None:
    from memory_admin.derived.search import search
    from memory_admin.derived.tasks import refresh_record_vectors
    from tests.support import at

    first, second = moved_deadline
    index = settings_index
    # As the agent meets it, right after the writes: nothing embedded yet, the same answer (read-your-writes).
    fresh = search(agent, project_id="project-a", q="submission deadline", k=5, now=at(10, 23))
    assert [h.record.memory_id for h in fresh.results] == [second.record.memory_id]
    assert [h.record.memory_id for h in fresh.held_back] == [first.record.memory_id]
    # This test is about the index path itself (the ANN index, its filler and another tenant's rows): the worker's
    # refresh task embeds the two records here, as a worker would.
    refresh_record_vectors([first.record.memory_id, second.record.memory_id])
    # Filler rows of both tenants (ids the database does not know: dropped, never shown), then the index.
    fill(index, 300, tenant_id=agent.tenant_pk, prefix="filler")
    fill(index, 300, tenant_id=outsider.tenant_pk, prefix="foreign", seed=8)
    index.upsert([entry("foreign-deadline", "task-42 submission_deadline: 2026-11-02", tenant_id=outsider.tenant_pk)])
    assert tasks.build_vector_ann_index() is not None and index.ann_index() is not None

    result = search(agent, project_id="project-a", q="submission deadline", k=5, now=at(10, 23))
    assert [h.record.memory_id for h in result.results] == [second.record.memory_id]
    assert result.results[0].usable and result.results[0].view is not None
    assert [(h.record.memory_id, h.reason_code) for h in result.held_back] == [(first.record.memory_id, "superseded")]
    # The other tenant finds nothing of acme through the index (its own rows are not in its database).
    other = search(outsider, project_id=None, q="submission deadline", k=5, now=at(10, 23))
    assert other.results == [] and other.held_back == []
    assert other.dropped >= 1  # its own index rows were proposed, then dropped: none of acme's


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("VECTOR_ANN_NPROBES", "0"),
        ("VECTOR_ANN_REFINE_FACTOR", "-1"),
        ("VECTOR_ANN_MIN_ROWS", "0"),
        ("VECTOR_ANN_PARTITIONS", "-4"),
        ("VECTOR_ANN_SUB_VECTORS", "x"),
        ("VECTOR_ANN_INDEX_TYPE", "HNSW"),
    ],
)
def test_an_ann_setting_out_of_range_stops_the_settings_from_loading(name: str, raw: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, name: raw, "DJANGO_SETTINGS_MODULE": "memory_admin.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and name in done.stderr


def test_envint_keeps_values_at_their_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_admin.env import envint

    monkeypatch.setenv("ANN_TEST_VALUE", "1")
    assert envint("ANN_TEST_VALUE", 5, minimum=1) == 1
    monkeypatch.setenv("ANN_TEST_VALUE", "")
    assert envint("ANN_TEST_VALUE", 5, minimum=1) == 5
