"""A read with `session_id` registers what it returned as usable as one context load of the caller, in the same
request and by the rule of `POST /context-loads/`: a later supersession sends that agent a notice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.derived.models import ContextItem, ContextLoad, Invalidation
from memory_admin.memory.actions import assert_fact, exclude_record
from tests.support import DEADLINE, at, deadline

FACTS = "/api/v1/facts/current/"
SEARCH = "/api/v1/search/"
QUERY = {"project_id": "project-a", "q": "submission deadline proposal", "k": 10}
NOTICES = "/api/v1/agents/agent-9/invalidations/"


@pytest.fixture
def oct30(agent):
    return assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record


def move_deadline(agent, old):
    return assert_fact(
        agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=old.revision)
    ).record


def loaded(load_id: str) -> list[tuple[str, int]]:
    load = ContextLoad.objects.get(public_id=load_id)
    return [(i.record.memory_id, i.revision) for i in ContextItem.objects.filter(load=load).select_related("record")]


def test_a_fact_read_with_session_id_registers_its_record_once_per_read(api, other_agent, oct30):
    client = api(other_agent)
    first = client.get(FACTS, {**DEADLINE, "session_id": "sess-9"})
    second = client.get(FACTS, {**DEADLINE, "session_id": "sess-9"})  # the cached answer: registered too
    assert first.status_code == second.status_code == 200
    ids = [first.json()["context_load"]["id"], second.json()["context_load"]["id"]]
    assert ids[0] and ids[1] and ids[0] != ids[1]
    assert ContextLoad.objects.count() == 2
    for load_id in ids:
        load = ContextLoad.objects.get(public_id=load_id)
        assert (load.agent_id, load.session_id) == (other_agent.pk, "sess-9")
        assert load.expires_at > timezone.now()
        assert loaded(load_id) == [(oct30.memory_id, oct30.revision)]
    # The registration is not kept in the cached answer: a read without session_id says nothing of it.
    assert "context_load" not in client.get(FACTS, DEADLINE).json()
    assert ContextLoad.objects.count() == 2


def test_a_later_supersession_sends_the_reader_a_notice(api, agent, other_agent, oct30):
    answer = api(other_agent).get(FACTS, {**DEADLINE, "session_id": "sess-9"}).json()
    new = move_deadline(agent, oct30)
    notices = api(other_agent).get(NOTICES).json()["results"]
    assert [(n["memory_id"], n["context_load_id"], n["session_id"]) for n in notices] == [
        (oct30.memory_id, answer["context_load"]["id"], "sess-9")
    ]
    assert notices[0]["current_memory_id"] == new.memory_id


def test_context_expires_at_sets_when_the_load_lapses(api, other_agent, oct30):
    until = timezone.now() + timedelta(minutes=30)
    answer = (
        api(other_agent).get(FACTS, {**DEADLINE, "session_id": "s", "context_expires_at": until.isoformat()}).json()
    )
    assert ContextLoad.objects.get(public_id=answer["context_load"]["id"]).expires_at == until


def test_a_search_with_session_id_registers_only_the_usable_hits(api, agent, other_agent, oct30):
    new = move_deadline(agent, oct30)
    response = api(other_agent).get(SEARCH, {**QUERY, "include": "all", "session_id": "sess-9"})
    assert response.status_code == 200
    hits = {h["memory_id"]: h["usable"] for h in response.json()["results"]}
    assert hits == {oct30.memory_id: False, new.memory_id: True}
    registered = response.json()["context_load"]
    assert (registered["agent_id"], registered["session_id"]) == ("agent-9", "sess-9")
    assert loaded(registered["id"]) == [(new.memory_id, new.revision)]
    assert ContextLoad.objects.count() == 1
    assert not Invalidation.objects.exists()  # the held-back (superseded) hit was never registered


def test_a_search_whose_hits_are_all_held_back_registers_nothing(api, owner, other_agent, oct30):
    exclude_record(owner, oct30.memory_id, "kept, not for agents")  # the only hit is held back (excluded)
    response = api(other_agent).get(SEARCH, {**QUERY, "include": "all", "session_id": "sess-9"})
    assert response.status_code == 200
    assert [h["usable"] for h in response.json()["results"]] == [False]
    assert response.json()["context_load"] is None
    assert not ContextLoad.objects.exists()


@pytest.mark.parametrize("url", [FACTS, SEARCH])
@pytest.mark.parametrize(
    "bad", [{"session_id": ""}, {"session_id": "s" * 201}, {"session_id": "s", "context_expires_at": "tomorrow"}]
)
def test_a_bad_session_id_is_400_and_registers_nothing(api, other_agent, oct30, url, bad):
    query = DEADLINE if url == FACTS else QUERY
    response = api(other_agent).get(url, {**query, **bad})
    assert response.status_code == 400
    assert response.json()["code"] and set(bad) & set(response.json()["errors"])
    assert not ContextLoad.objects.exists()


def test_without_session_id_nothing_is_registered(api, other_agent, oct30):
    client = api(other_agent)
    fact = client.get(FACTS, DEADLINE).json()
    found = client.get(SEARCH, QUERY).json()
    assert fact["memory_id"] == oct30.memory_id and [h["memory_id"] for h in found["results"]] == [oct30.memory_id]
    assert "context_load" not in fact and "context_load" not in found
    assert not ContextLoad.objects.exists()


def test_an_unknown_fact_read_with_session_id_is_404_and_registers_nothing(api, other_agent, oct30):
    response = api(other_agent).get(FACTS, {**DEADLINE, "predicate": "budget", "session_id": "sess-9"})
    assert response.status_code == 404
    assert not ContextLoad.objects.exists()


def test_an_outsider_reading_with_session_id_registers_nothing(api, outsider, oct30):
    assert api(outsider).get(FACTS, {**DEADLINE, "session_id": "s"}).status_code == 404
    assert not ContextLoad.objects.exists()
