"""The embedded LanceDB vector index and the offline embedder.

No database: every test builds its own index under `tmp_path`.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from memory_admin.derived import embedding
from memory_admin.derived.embedding import HashingEmbedder, get_embedder
from memory_admin.derived.vectors import (
    EmbedderMismatchError,
    VectorEntry,
    VectorIndex,
    clear_index_cache,
    get_index,
    sql_int,
    sql_str,
    where_objects,
)
from tests.support import ROOT

DIM = 256


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def rec(
    object_id: str,
    text: str,
    *,
    tenant_id: int = 1,
    project_id: str = "alpha",
    kind: str = "record",
    revision: int = 1,
    usable: bool = True,
) -> VectorEntry:
    return VectorEntry(
        entry_id=f"{kind}:{object_id}",
        tenant_id=tenant_id,
        project_id=project_id,
        kind=kind,
        object_id=object_id,
        revision=revision,
        text=text,
        usable=usable,
    )


@pytest.fixture
def index(tmp_path: Path) -> VectorIndex:
    return VectorIndex(tmp_path / "vectors", embedder=HashingEmbedder(DIM))


CORPUS = [
    rec("mem-cat", "The customer prefers email contact about invoices"),
    rec("mem-ship", "Shipping to Osaka takes three business days"),
    rec("mem-jp", "東京オフィスの会議室は毎週月曜日に予約が必要です"),
    rec("mem-pw", "Password resets are handled by the IT helpdesk"),
]


# --- embedder -------------------------------------------------------------------------------------


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    texts = ["Hello world", "東京の天気は晴れです", "", "!!!"]
    first = HashingEmbedder(DIM).embed(texts)
    assert first == HashingEmbedder(DIM).embed(texts)
    for vector in first:
        assert len(vector) == DIM
        assert math.isclose(math.sqrt(sum(v * v for v in vector)), 1.0)  # empty text too: never zero


def test_hashing_embedder_is_stable_across_processes() -> None:
    # Python's hash() is salted per process; the embedder must not depend on it.
    code = (
        "from memory_admin.derived.embedding import HashingEmbedder;"
        "print(repr(HashingEmbedder(64).embed(['stable across processes 東京'])[0]))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            cwd=ROOT,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1
    assert runs.pop().strip() == repr(HashingEmbedder(64).embed(["stable across processes 東京"])[0])


@pytest.mark.parametrize(
    ("text", "similar", "unrelated"),
    [
        ("The cat sat on the mat", "A cat sat on a mat", "Quarterly revenue grew by ten percent"),
        ("refund policy for damaged goods", "what is the refund policy", "meeting room booking calendar"),
        ("東京の天気は晴れです", "明日の東京の天気は雨です", "株式市場は大幅に下落した"),
        ("会議室の予約が必要です", "会議室を予約してください", "パスワードを忘れました"),
    ],
)
def test_hashing_embedder_similar_beats_unrelated(text: str, similar: str, unrelated: str) -> None:
    base, near, far = HashingEmbedder(DIM).embed([text, similar, unrelated])
    assert cosine(base, near) > cosine(base, far)
    assert cosine(base, near) > 0.2


def test_get_embedder_falls_back_to_hashing(settings: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import raises ImportError
    settings.EMBEDDING_MODEL = "some/model-not-on-disk"  # type: ignore[attr-defined]
    settings.EMBEDDING_DIM = 64  # type: ignore[attr-defined]
    get_embedder.cache_clear()
    try:
        chosen = get_embedder()
        assert isinstance(chosen, HashingEmbedder)
        assert chosen.dim == 64
        assert get_embedder() is chosen  # cached
    finally:
        get_embedder.cache_clear()


def test_get_embedder_uses_a_locally_loadable_model(settings: object, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, dict[str, object]]] = []

    class FakeModel:
        def __init__(self, name: str, **kwargs: object) -> None:
            calls.append((name, kwargs))

        def get_sentence_embedding_dimension(self) -> int:
            return 3

        def encode(self, texts: list[str], **kwargs: object) -> list[list[float]]:
            return [[1.0, 0.0, 0.0] for _ in texts]

    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=FakeModel))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    settings.EMBEDDING_MODEL = "local/model"  # type: ignore[attr-defined]
    get_embedder.cache_clear()
    try:
        chosen = get_embedder()
        assert isinstance(chosen, embedding.SentenceTransformerEmbedder)
        assert (chosen.dim, chosen.name) == (3, "st:local/model")
        assert chosen.embed(["x"]) == [[1.0, 0.0, 0.0]]
        assert calls == [("local/model", {"local_files_only": True})]
        assert os.environ["HF_HUB_OFFLINE"] == "1"
    finally:
        get_embedder.cache_clear()


# --- index ----------------------------------------------------------------------------------------


def test_upsert_then_search_returns_the_right_object_first(index: VectorIndex) -> None:
    index.upsert(CORPUS)
    assert index.count() == 4

    hits = index.search(tenant_id=1, project_id="alpha", text="how do I reset my password", k=3)
    assert hits[0].object_id == "mem-pw"
    assert hits[0].entry_id == "record:mem-pw"
    assert hits[0].kind == "record" and hits[0].revision == 1 and hits[0].usable
    assert hits[0].text == "Password resets are handled by the IT helpdesk"
    assert len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert 0.0 < hits[0].score <= 1.0 + 1e-6

    jp = index.search(tenant_id=1, project_id="alpha", text="会議室の予約", k=1)
    assert [h.object_id for h in jp] == ["mem-jp"]

    assert index.search(tenant_id=1, project_id="alpha", text="anything", k=0) == []


def test_filters_tenant_project_usable_kind(index: VectorIndex) -> None:
    text = "invoice reminder policy"
    index.upsert(
        [
            rec("a", text),
            rec("b", text, project_id="beta"),
            rec("c", text, usable=False),
            rec("s", text, kind="summary"),
            rec("other", text, tenant_id=2),
        ]
    )

    def ids(**kwargs: object) -> set[str]:
        params: dict = {"tenant_id": 1, "project_id": "alpha", "text": text, "k": 10, **kwargs}
        return {h.object_id for h in index.search(**params)}

    assert ids() == {"a", "s"}
    assert ids(project_id=None) == {"a", "b", "s"}
    assert ids(usable_only=False) == {"a", "c", "s"}
    assert ids(kind="record") == {"a"}
    assert ids(kind="summary") == {"s"}
    assert ids(tenant_id=2, project_id=None, usable_only=False) == {"other"}
    assert ids(tenant_id=3, project_id=None, usable_only=False) == set()
    # Another tenant's rows never come back, however many are asked for.
    assert "other" not in ids(project_id=None, usable_only=False, k=1000)
    assert index.count(tenant_id=1) == 4
    assert index.count(tenant_id=2) == 1


def test_set_usable_hides_from_usable_only_searches(index: VectorIndex) -> None:
    index.upsert(CORPUS)
    assert index.set_usable(["record:mem-pw"], False) == 1
    assert index.set_usable(["record:mem-pw"], False) == 0  # already unusable: nothing changed
    assert index.set_usable(["record:does-not-exist"], True) == 0

    query = {"tenant_id": 1, "project_id": "alpha", "text": "password reset helpdesk", "k": 4}
    assert "mem-pw" not in {h.object_id for h in index.search(**query)}  # type: ignore[arg-type]
    shown = {h.object_id: h for h in index.search(**query, usable_only=False)}  # type: ignore[arg-type]
    assert shown["mem-pw"].usable is False
    assert shown["mem-cat"].usable is True

    assert index.set_usable(["record:mem-pw", "record:mem-cat"], True) == 1
    assert index.search(**query)[0].object_id == "mem-pw"  # type: ignore[arg-type]


def test_reupsert_replaces_the_row(index: VectorIndex) -> None:
    index.upsert(CORPUS)
    index.upsert([rec("mem-ship", "Deliveries to Sapporo are suspended in winter storms", revision=2)])

    assert index.count() == 4
    [entry] = index.find(tenant_id=1, object_ids=["mem-ship"])
    assert entry.revision == 2
    assert entry.text.startswith("Deliveries to Sapporo")
    hits = index.search(tenant_id=1, project_id="alpha", text="Sapporo winter deliveries", k=1)
    assert (hits[0].object_id, hits[0].revision) == ("mem-ship", 2)
    assert not index.contains_text("Osaka")

    # Duplicates within one batch: the last one wins, no duplicate rows.
    index.upsert([rec("dup", "first", revision=1), rec("dup", "second", revision=2)])
    assert [(e.revision, e.text) for e in index.find(tenant_id=1, object_ids=["dup"])] == [(2, "second")]


def test_find_is_exact_and_tenant_scoped(index: VectorIndex) -> None:
    index.upsert([*CORPUS, rec("mem-cat", "sum", kind="summary")])
    index.upsert([VectorEntry("record:t2-cat", 2, "alpha", "record", "mem-cat", 1, "tenant two's copy")])
    found = index.find(tenant_id=1, object_ids=["mem-cat", "missing"])
    assert [e.entry_id for e in found] == ["record:mem-cat", "summary:mem-cat"]
    assert found[0] == CORPUS[0]
    assert index.find(tenant_id=1, object_ids=[]) == []


def test_unknown_kind_is_rejected(index: VectorIndex) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        index.upsert([rec("x", "text", kind="fact")])


def test_an_entry_id_cannot_move_to_another_tenant(index: VectorIndex) -> None:
    index.upsert([rec("shared-id", "tenant one's text")])
    with pytest.raises(ValueError, match="another tenant"):
        index.upsert([rec("fine", "ok", tenant_id=2), rec("shared-id", "tenant two's text", tenant_id=2)])
    [kept] = index.find(tenant_id=1, object_ids=["shared-id"])
    assert kept.text == "tenant one's text"
    assert index.count(tenant_id=2) == 0  # the whole batch was refused


def test_merge_never_rewrites_another_tenants_row(index: VectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    # A concurrent writer can slip past the up-front check; the merge condition still holds.
    index.upsert([rec("shared-id", "tenant one's text")])
    monkeypatch.setattr(index, "_refuse_cross_tenant", lambda batch: None)
    with pytest.raises(ValueError, match="another tenant"):
        index.upsert([rec("shared-id", "tenant two's text", tenant_id=2)])
    [kept] = index.find(tenant_id=1, object_ids=["shared-id"])
    assert kept.text == "tenant one's text"
    assert index.count() == 1


def test_delete_and_delete_where_object(index: VectorIndex) -> None:
    index.upsert([*CORPUS, rec("mem-pw", "summary of passwords", kind="summary")])
    index.upsert([VectorEntry("record:t2-pw", 2, "alpha", "record", "mem-pw", 1, "tenant two's row")])
    assert index.delete(["record:mem-cat", "record:nope"]) == 1
    assert index.delete([]) == 0
    assert index.find(tenant_id=1, object_ids=["mem-cat"]) == []

    assert index.delete_where_object(1, ["mem-pw"]) == 2  # record and summary
    assert index.find(tenant_id=1, object_ids=["mem-pw"]) == []
    assert [e.tenant_id for e in index.find(tenant_id=2, object_ids=["mem-pw"])] == [2]  # other tenant untouched
    assert index.count() == 3
    hits = index.search(tenant_id=1, project_id=None, text="password reset", k=10, usable_only=False)
    assert "mem-pw" not in {h.object_id for h in hits}


def test_cleanup_physically_removes_deleted_rows(index: VectorIndex) -> None:
    secret = "Patient ZX-4471 was prescribed lithium"
    index.upsert([*CORPUS, rec("mem-secret", secret)])
    index.set_usable(["record:mem-cat"], False)  # a few more versions, like real use
    assert index.delete_where_object(1, ["mem-secret"]) == 1

    where = where_objects(1, ["mem-secret"])
    assert not index.contains_text("ZX-4471")  # gone from the current version...
    assert index.rows_in_any_version(where) >= 1  # ...but an old version still holds it
    assert index.files_contain("ZX-4471")
    versions_before = index.versions()
    assert versions_before > 1

    stats = index.compact_and_cleanup()

    assert stats["versions_before"] == versions_before
    assert stats["versions_after"] == 1
    assert index.versions() == 1
    assert index.rows_in_any_version(where) == 0
    assert not index.contains_text("ZX-4471")
    assert not index.files_contain("ZX-4471")
    # The survivors are intact and the index keeps working.
    assert index.count() == 4
    assert index.search(tenant_id=1, project_id="alpha", text="password helpdesk", k=1)[0].object_id == "mem-pw"
    index.upsert([rec("mem-new", "after cleanup")])
    assert index.count() == 5


def test_reopening_with_another_embedder_is_refused(tmp_path: Path) -> None:
    VectorIndex(tmp_path, embedder=HashingEmbedder(DIM)).upsert([rec("a", "text")])
    with pytest.raises(EmbedderMismatchError):
        VectorIndex(tmp_path, embedder=HashingEmbedder(64)).count()
    index = VectorIndex(tmp_path, embedder=HashingEmbedder(DIM))
    index.compact_and_cleanup()  # the embedder stamp survives rewriting the table
    assert VectorIndex(tmp_path, embedder=HashingEmbedder(DIM)).count() == 1


def test_where_string_escaping(index: VectorIndex) -> None:
    assert sql_str("it's") == "'it''s'"
    assert sql_str("a\\'b") == "'a\\''b'"
    assert sql_int(7) == "7"
    with pytest.raises(TypeError):
        sql_int("1 OR 1=1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sql_int(True)

    quoted = "mem-o'brien"
    injection = "x' OR tenant_id = 2 OR 'a' = 'a"
    backslash = "mem\\'"
    index.upsert(
        [
            rec(quoted, "O'Brien's notes about the quarterly budget"),
            rec(backslash, "backslash id"),
            rec("victim", "tenant two's data", tenant_id=2),
            rec("bystander", "tenant one's other row"),
        ]
    )
    assert [e.object_id for e in index.find(tenant_id=1, object_ids=[quoted])] == [quoted]
    assert [e.object_id for e in index.find(tenant_id=1, object_ids=[backslash])] == [backslash]
    assert index.find(tenant_id=1, object_ids=[injection]) == []
    hits = index.search(tenant_id=1, project_id=injection, text="budget", k=10, usable_only=False)
    assert hits == []
    assert index.set_usable([f"record:{injection}"], False) == 0
    assert index.delete_where_object(1, [injection]) == 0
    assert index.delete([f"record:{injection}"]) == 0
    assert index.count() == 4

    assert index.set_usable([f"record:{quoted}"], False) == 1
    assert index.delete_where_object(1, [quoted]) == 1
    assert index.count() == 3
    assert {e.object_id for e in index.find(tenant_id=2, object_ids=["victim"])} == {"victim"}


def _writer(path: str, worker: int, n: int, barrier: Any) -> None:
    """Runs in a spawned process: many small commits, started together so the writers interleave."""
    index = VectorIndex(path, embedder=HashingEmbedder(DIM))
    index.count()  # open the table before waiting, so the commits below really overlap
    barrier.wait(timeout=60)
    for i in range(n):
        index.upsert([rec(f"w{worker}-{i}", f"worker {worker} item {i} about topic {i % 3}")])
    index.set_usable([f"record:w{worker}-0"], False)


def _cleaner(path: str, rounds: int, barrier: Any) -> None:
    """Removes old versions while the writers commit: the index lock must keep them from breaking."""
    index = VectorIndex(path, embedder=HashingEmbedder(DIM))
    index.count()
    barrier.wait(timeout=60)
    for _ in range(rounds):
        index.compact_and_cleanup()


def test_several_processes_write_one_reads_all(tmp_path: Path) -> None:
    path = str(tmp_path / "shared")
    reader = VectorIndex(path, embedder=HashingEmbedder(DIM))
    reader.upsert([rec("seed", "opened before the writers start")])
    assert reader.count() == 1

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_writer, args=(path, w, 10, barrier)) for w in (1, 2)]
    procs.append(ctx.Process(target=_cleaner, args=(path, 5, barrier)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0]

    # The reader's handle was opened before the writes and still sees them all.
    assert reader.count() == 21
    found = reader.find(tenant_id=1, object_ids=[f"w{w}-{i}" for w in (1, 2) for i in range(10)])
    assert len(found) == 20
    assert {e.object_id for e in found if not e.usable} == {"w1-0", "w2-0"}
    hits = reader.search(tenant_id=1, project_id="alpha", text="worker 2 item 5", k=1)
    assert hits[0].object_id == "w2-5"


def test_get_index_is_cached_per_path(tmp_path: Path, settings: object) -> None:
    settings.VECTOR_INDEX_PATH = str(tmp_path / "default")  # type: ignore[attr-defined]
    clear_index_cache()
    try:
        default = get_index()
        assert default is get_index()
        assert default.path == (tmp_path / "default").resolve()
        other = get_index(tmp_path / "other")
        assert other is not default
        assert other is get_index(str(tmp_path / "other"))
    finally:
        clear_index_cache()
