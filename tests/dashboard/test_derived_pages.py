"""Dashboard pages for derived stores: the fact's dependants, agents' open notices, retrieval preview."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.tasks import refresh_record_vectors
from memory_admin.memory.actions import assert_fact
from tests.support import at, deadline

FACT_URL = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def story(agent, other_agent):
    old = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    lineage.create_summary(agent, project_id="project-a", text="Due Oct 30", bases=[BaseRef(old.memory_id, 1)])
    lineage.register_context_load(
        other_agent,
        session_id="sess-9",
        bases=[BaseRef(old.memory_id, 1)],
        expires_at=timezone.now() + timedelta(hours=2),
    )
    new = assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)).record
    return old, new


def test_the_fact_page_lists_dependants_and_unacknowledged_notices(owner, agent, other_agent):
    story(agent, other_agent)
    page = signed_in(owner).get(FACT_URL).content.decode()
    assert "Due Oct 30" in page and "stale" in page
    assert "1 notice not yet acknowledged" in page
    # Said in words, the dependant's id only in a copyable field (issue 34, item 1).
    assert "Propagation log" in page and "marked stale" in page and "marked_stale" not in page


def test_the_agents_page_lists_open_notices_by_age(owner, agent, other_agent):
    old, _ = story(agent, other_agent)
    page = signed_in(owner).get("/agents/").content.decode()
    assert "agent-9" in page and old.memory_id in page and "sess-9" in page


def test_the_agents_page_says_when_nothing_is_open(owner, db):
    assert "Every agent has applied its notices" in signed_in(owner).get("/agents/").content.decode()


def test_the_retrieval_preview_shows_what_is_held_back(owner, agent, other_agent):
    """Previewed right after the writes (no worker has embedded them): found by their words, shown by rank."""
    old, new = story(agent, other_agent)
    response = signed_in(owner).get("/retrieval/?q=submission+deadline+proposal&project=project-a")
    result = response.context["result"]
    assert [h.record.memory_id for h in result.results] == [new.memory_id]
    assert [h.record.memory_id for h in result.held_back] == [old.memory_id]
    page = response.content.decode()
    assert "Held back" in page and "Match 1" in page and "just written, found by its words" in page


def test_the_retrieval_preview_shows_ranks_not_scores_and_takes_filters(owner, agent, other_agent):
    old, new = story(agent, other_agent)
    client = signed_in(owner)
    # Right after the writes the preview already ranks them (found by their words; the test above). This test is
    # about how an embedded hit is shown, so the worker's refresh task embeds them here, as a worker would.
    fresh = client.get("/retrieval/?q=submission+deadline+proposal").context["result"].results
    assert [(h.record.memory_id, h.match) for h in fresh] == [(new.memory_id, "keyword")]
    refresh_record_vectors([old.memory_id, new.memory_id])  # indexed: the hits have cosine scores
    response = client.get("/retrieval/?q=submission+deadline+proposal")
    hit = response.context["result"].results[0]
    assert hit.match == "vector" and hit.rank == 1 and hit.score is not None
    page = response.content.decode()
    assert "Match 1" in page and f"{hit.score:.2f}" not in page and "just written" not in page
    narrowed = client.get(f"/retrieval/?q=submission+deadline&subject={new.subject_id}&predicate=nothing_such")
    assert narrowed.context["result"].results == [] and 'value="nothing_such"' in narrowed.content.decode()


def test_the_pages_need_a_tenant_member(outsider, agent, other_agent):
    old, _ = story(agent, other_agent)
    client = signed_in(outsider)
    assert old.memory_id not in client.get("/agents/").content.decode()
    assert client.get("/retrieval/?q=submission+deadline").context["result"].results == []  # not even pending ones
    refresh_record_vectors([old.memory_id])
    assert client.get("/retrieval/?q=submission+deadline").context["result"].results == []
