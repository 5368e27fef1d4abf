"""Read-your-writes for search (issue 32): a fact is findable through `GET /search/` the moment its write is
answered, by the writer and everyone else, before its vector entry is written (one write, a batch); held back by
the same rules as an indexed hit; never another tenant's; narrowed by `subject_id`, `predicate` and `project_id`.
A hit's `score` is the cosine similarity for an indexed hit and null for a keyword match; `rank` is 1-based.

No worker runs here and no refresh is run by hand before a search about what an agent sees: the searches read the
records as the write left them. Only the tests about the hand-over to the index run `refresh_record_vectors`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from deletion.models import StoreProgress
from deletion.tasks import purge_store
from memory_admin.derived.models import PendingVector
from memory_admin.derived.tasks import refresh_record_vectors
from memory_admin.memory.models import MemoryRecord

PROJECT = "project-a"
SEARCH = "/api/v1/search/"


def body(subject: str, predicate: str, value: Any, *, project: str = PROJECT, **extra: Any) -> dict[str, Any]:
    valid_from = extra.pop("valid_from", timezone.now() - timedelta(minutes=5))
    return {
        "project_id": project,
        "subject_id": subject,
        "predicate": predicate,
        "value": value,
        "valid_from": valid_from.isoformat(),
        "source": {"canonical_ref": extra.pop("ref", f"chat:{subject}"), "revision": extra.pop("revision", "r1")},
        **extra,
    }


def write(client: Any, subject: str, predicate: str, value: Any, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/v1/records/", body(subject, predicate, value, **extra), format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


def search(client: Any, q: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get(SEARCH, {"q": q, **params})
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_a_fact_is_found_the_moment_its_write_is_answered_by_the_writer_and_everyone_else(api, agent, other_agent):
    written = write(api(agent), "u3", "profile", {"lang": "ja"})
    for reader in (agent, other_agent):
        hits = search(api(reader), "lang")
        assert [h["memory_id"] for h in hits] == [written["memory_id"]]
        assert (hits[0]["match"], hits[0]["score"], hits[0]["rank"]) == ("keyword", None, 1)
        assert hits[0]["usable"] is True and hits[0]["value"] == {"lang": "ja"}
        assert hits[0]["action_allowed"] is True  # the governance facts of a usable hit, as for an indexed one
    assert PendingVector.objects.filter(record__memory_id=written["memory_id"]).exists()


def test_a_batch_is_found_at_once(api, agent):
    items = [
        body("acct-1", "owner", "alice morgan", ref="crm:acct-1"),
        body("acct-2", "owner", "bob stone", ref="crm:acct-2"),
        body("acct-3", "renewal", "march", ref="crm:acct-3"),
    ]
    response = api(agent).post("/api/v1/records/batch/", {"items": items}, format="json")
    assert response.status_code == 200, response.content
    ids = [item["record"]["memory_id"] for item in response.json()["results"]]
    client = api(agent)
    assert [h["memory_id"] for h in search(client, "who owns it: bob stone")] == [ids[1]]
    assert {h["memory_id"] for h in search(client, "owner")} == set(ids[:2])
    assert [h["memory_id"] for h in search(client, "renewal month")] == [ids[2]]


def test_once_embedded_the_hit_comes_from_the_index_with_its_cosine_similarity(api, agent):
    """The hand-over: the worker's refresh writes the entry and clears the mark; the hit is then the index's,
    once, with a score in [-1, 1]. (This test is about the index, so it runs the worker's task itself.)"""
    written = write(api(agent), "u3", "profile", {"lang": "ja"})
    # Before the hand-over, as the agent meets it: found at once, by its words.
    assert [(h["memory_id"], h["match"]) for h in search(api(agent), "lang")] == [(written["memory_id"], "keyword")]
    refresh_record_vectors([written["memory_id"]])
    assert not PendingVector.objects.exists()
    hits = search(api(agent), "lang")
    assert [h["memory_id"] for h in hits] == [written["memory_id"]]
    assert hits[0]["match"] == "vector" and hits[0]["rank"] == 1
    assert isinstance(hits[0]["score"], float) and -1.0 <= hits[0]["score"] <= 1.0

    # A pending hit and indexed ones in one answer: ranks 1..n, the keyword match placed by the fusion rule.
    newer = write(api(agent), "u4", "profile", {"lang": "fr"})
    both = search(api(agent), "lang", include="all")
    assert [h["rank"] for h in both] == list(range(1, len(both) + 1))
    assert {h["memory_id"]: h["match"] for h in both} == {
        newer["memory_id"]: "keyword",
        written["memory_id"]: "vector",
    }


def test_a_just_superseded_value_is_never_usable(api, agent):
    client = api(agent)
    first = write(client, "task-9", "deadline", "Oct 30", ref="task-system:task-9", revision="r1")
    second = write(client, "task-9", "deadline", "Nov 2", ref="task-system:task-9", revision="r2", expected_revision=1)
    assert [h["memory_id"] for h in search(client, "deadline")] == [second["memory_id"]]
    every = {h["memory_id"]: h for h in search(client, "deadline", include="all")}
    held = every[first["memory_id"]]
    assert (held["usable"], held["reason_code"], held["current_memory_id"]) == (
        False,
        "superseded",
        second["memory_id"],
    )
    assert held["action_allowed"] is None and held["match"] == "keyword"


def test_excluded_disputed_and_not_yet_effective_values_are_held_back(api, agent, other_agent, owner):
    client = api(agent)
    excluded = write(client, "room-1", "booking", "room three", ref="chat:1")
    response = api(owner).post(
        f"/api/v1/records/{excluded['memory_id']}/exclude/", {"reason": "Wrong room."}, format="json"
    )
    assert response.status_code == 200, response.content
    said = timezone.now() - timedelta(hours=1)  # two equal-rank sources at the same instant: a dispute
    write(client, "room-2", "booking", "room four", ref="chat:a", valid_from=said)
    disputed = api(other_agent).post(
        "/api/v1/records/", body("room-2", "booking", "room five", ref="chat:b", valid_from=said), format="json"
    )
    assert disputed.json()["outcome"] == "disputed", disputed.content
    write(client, "room-3", "booking", "room six", valid_from=timezone.now() + timedelta(days=1))

    assert search(client, "booking room") == []
    reasons = {(h["subject_id"], h["reason_code"]) for h in search(client, "booking room", include="all")}
    assert reasons == {
        ("room-1", "excluded"),
        ("room-2", "disputed"),
        ("room-3", "not_yet_in_effect"),
    }


@pytest.mark.parametrize("purged", [False, True])
def test_a_deleted_subjects_records_never_come_back_through_keyword_matching(api, agent, compliance, purged):
    client = api(agent)
    gone = write(client, "sato", "email", "sato@example.com")
    write(client, "kept", "email", "kept@example.com")
    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": PROJECT, "scope": {"subject_id": "sato"}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202, response.content
    if purged:
        for progress in StoreProgress.objects.filter(request__public_id=response.json()["id"]):
            purge_store.apply(args=[progress.pk])
        assert not MemoryRecord.all_objects.filter(memory_id=gone["memory_id"]).exists()
        # The mark went with the record (CASCADE): no row points at a purged record.
        assert not PendingVector.objects.filter(record__subject_id="sato").exists()
        assert PendingVector.objects.count() == 1
    for include in ("usable", "all"):
        assert [h["subject_id"] for h in search(client, "email example", include=include)] == ["kept"]


def test_another_tenants_pending_records_never_appear(api, agent, outsider):
    mine = write(api(agent), "u3", "profile", {"lang": "ja"})
    theirs = write(api(outsider), "u3", "profile", {"lang": "de"})
    assert [h["memory_id"] for h in search(api(agent), "lang", include="all")] == [mine["memory_id"]]
    assert [h["memory_id"] for h in search(api(outsider), "lang", include="all")] == [theirs["memory_id"]]


def test_subject_predicate_and_project_filters_narrow_indexed_and_pending_hits(api, agent):
    client = api(agent)
    u1_lang = write(client, "u1", "lang", "japanese language")
    u2_lang = write(client, "u2", "lang", "french language")
    u1_zone = write(client, "u1", "timezone", "tokyo language region")
    other = write(client, "u1", "lang", "german language", project="project-b")

    def found(**params: Any) -> set[str]:
        return {h["memory_id"] for h in search(client, "language", **params)}

    def assert_filters_narrow() -> None:
        assert found() == {u1_lang["memory_id"], u2_lang["memory_id"], u1_zone["memory_id"], other["memory_id"]}
        assert found(subject_id="u1") == {u1_lang["memory_id"], u1_zone["memory_id"], other["memory_id"]}
        assert found(predicate="lang") == {u1_lang["memory_id"], u2_lang["memory_id"], other["memory_id"]}
        assert found(project_id="project-b") == {other["memory_id"]}
        assert found(project_id=PROJECT, subject_id="u1", predicate="lang") == {u1_lang["memory_id"]}
        assert found(subject_id="nobody") == set()

    # As the agent meets it, right after the writes: every hit is pending, found by its words.
    assert_filters_narrow()
    # The same filters once a worker has embedded two of them (the index's own filter, run here as the worker's
    # task would): two indexed, two still pending, one answer.
    refresh_record_vectors([u1_lang["memory_id"], other["memory_id"]])
    assert_filters_narrow()
    for bad in ({"subject_id": "../etc"}, {"predicate": " lang"}, {"predicate": "x" * 201}):
        response = client.get(SEARCH, {"q": "language", **bad})
        assert response.status_code == 400, (bad, response.content)
        assert set(bad) & set(response.json()["errors"])


@pytest.mark.parametrize("q", ["%", "__", "%%lang", "' OR 1=1 --", "\\"])
def test_the_query_is_matched_as_words_never_as_a_pattern(api, agent, q):
    """LIKE's wildcards in a query match only themselves: `%` is no word, `__` matches no value here."""
    write(api(agent), "promo", "discount", "fifty percent off")
    hits = search(api(agent), q)
    assert [h["match"] for h in hits if h["match"] == "keyword"] == []


def test_japanese_words_are_found_before_they_are_embedded(api, agent):
    written = write(api(agent), "田中", "締切", "十一月二日の十七時")
    client = api(agent)
    assert [h["memory_id"] for h in search(client, "締切はいつ")] == [written["memory_id"]]
    assert [h["memory_id"] for h in search(client, "十一月")] == [written["memory_id"]]  # in the value
    assert search(client, "十二月は") == []
