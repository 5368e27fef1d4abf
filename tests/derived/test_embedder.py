"""The search embedder (issue 32): a real multilingual model from the package registry by default, offline; the
lexical hashing embedder only where no model loads, and then said on the overview and in every search answer;
an index built by another embedder answers 503 with the command, and `reindex_vectors --rebuild` re-embeds."""

from __future__ import annotations

import math
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client as PageClient

from memory_admin.derived import embedding
from memory_admin.derived.vectors import clear_index_cache, get_index
from memory_admin.memory.actions import assert_fact
from tests.support import at, deadline


@pytest.fixture
def embedder_set(settings: Any, tmp_path: Any) -> Iterator[Any]:
    """Set EMBEDDER for the test (its own vector index folder), as an operator's environment would."""

    def choose(name: str, folder: str = "vectors") -> None:
        settings.EMBEDDER = name
        settings.VECTOR_INDEX_PATH = str(tmp_path / folder)
        embedding.get_embedder.cache_clear()
        clear_index_cache()

    yield choose
    embedding.get_embedder.cache_clear()
    clear_index_cache()


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_default_is_the_multilingual_model_and_loads_offline() -> None:
    status = embedding.embedder_status()
    assert not status.fallback, status.reason
    assert status.name == "fused(e5-small-q4-v1+use-m3-v1)" and embedding.get_embedder().dim == 384 + 512
    assert "E5" in status.label and "Universal Sentence Encoder" in status.label


def test_meaning_not_words_finds_a_paraphrase_across_languages() -> None:
    model = embedding.get_embedder()
    facts = [
        embedding.record_text("task-proposal-017", "submission_deadline", "2026-11-02T17:00+09:00"),
        embedding.record_text("佐藤 花子", "会議室", "第3会議室"),
        embedding.record_text("株式会社あおば出版", "契約プラン", {"plan": "スタンダード", "seats": 12}),
    ]
    stored = model.embed(facts)
    for question, expected in (
        ("When is the proposal due?", 0),
        ("Which room does Hanako Sato meet in?", 1),
        ("あおば出版はどのプランを契約していますか", 2),
    ):
        asked = embedding.query_vector(model, question)
        scores = [_cosine(asked, vector) for vector in stored]
        assert max(range(3), key=scores.__getitem__) == expected, (question, scores)
    # The hashing embedder shares no word between the first question and its fact.
    hashing = embedding.HashingEmbedder()
    assert _cosine(hashing.embed(["When is the proposal due?"])[0], hashing.embed([facts[0]])[0]) <= 0.2


def test_the_fused_score_is_the_mean_of_the_two_models_cosines() -> None:
    e5, use = embedding.E5Embedder(), embedding.USEEmbedder()
    fused = embedding.FusedEmbedder([e5, use])
    text, question = "meeting room: Room 3", "where is the meeting?"
    expected = (
        _cosine(embedding.query_vector(e5, question), e5.embed([text])[0])
        + _cosine(embedding.query_vector(use, question), use.embed([text])[0])
    ) / 2
    got = _cosine(embedding.query_vector(fused, question), fused.embed([text])[0])
    assert math.isclose(got, expected, abs_tol=1e-5)
    assert math.isclose(_cosine(fused.embed([text])[0], fused.embed([text])[0]), 1.0, abs_tol=1e-4)


def test_what_is_indexed_reads_predicates_as_words_and_values_as_written() -> None:
    assert embedding.record_text("佐藤 花子", "submission_deadline", {"日": "月曜"}) == (
        '佐藤 花子 submission deadline: {"日": "月曜"}'
    )


@pytest.mark.django_db
def test_a_model_that_cannot_load_falls_back_to_hashing_and_every_answer_says_so(
    embedder_set: Any, api: Any, agent: Any, owner: Any
) -> None:
    embedder_set("no-such-model")
    status = embedding.embedder_status()
    assert status.fallback and status.name == "hashing-v1-256" and "no-such-model" in status.reason
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1))
    answer = api(agent).get("/api/v1/search/", {"q": "submission deadline"}).json()
    assert answer["embedder"] == {
        "name": "hashing-v1-256",
        "fallback": True,
        "detail": "The language model could not load on this server: search matches words, not meaning.",
    }
    page = PageClient()
    page.force_login(owner)
    assert "Search matches words, not meaning." in page.get("/").content.decode()


@pytest.mark.django_db
def test_an_index_of_another_embedder_answers_503_until_it_is_rebuilt(embedder_set: Any, api: Any, agent: Any) -> None:
    embedder_set("hashing", "shared")
    record = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1)).record
    call_command("reindex_vectors", "--no-progress", stdout=StringIO())
    assert get_index().stored_embedder() == "hashing-v1-256"

    embedder_set("use", "shared")  # the operator changed EMBEDDER; the index on disk is the old one
    refused = api(agent).get("/api/v1/search/", {"q": "deadline"})
    assert refused.status_code == 503 and refused.json()["code"] == "index_rebuild_needed"
    assert "reindex_vectors --rebuild" in refused.json()["detail"]

    out = StringIO()
    call_command("reindex_vectors", "--if-needed", "--no-progress", stdout=out)
    assert "rebuilding it for use-m3-v1" in out.getvalue() and "Indexed 1 records" in out.getvalue()
    again = StringIO()
    call_command("reindex_vectors", "--if-needed", "--no-progress", stdout=again)
    assert "nothing to rebuild" in again.getvalue()
    found = api(agent).get("/api/v1/search/", {"q": "When is the proposal due?"}).json()
    assert [h["memory_id"] for h in found["results"]] == [record.memory_id]
    assert found["embedder"]["name"] == "use-m3-v1" and found["results"][0]["score"] is not None


def test_reindex_refuses_a_bad_batch_and_a_rebuild_of_one_tenant() -> None:
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="--batch"):
        call_command("reindex_vectors", "--batch", "0", stdout=StringIO())
    with pytest.raises(CommandError, match="without --tenant"):
        call_command("reindex_vectors", "--rebuild", "--tenant", "acme", stdout=StringIO())
