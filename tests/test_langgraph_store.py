"""GovernedStore (memory_governance.langgraph_store) under real LangGraph graphs and LangMem's memory tools,
against a live server of this project, with no LLM: nodes put, get and search directly.

- a fact superseded between two runs is not returned as current on the second run, and the agent has a notice;
- a put on a stale revision surfaces the 409 (RevisionConflict), never last-writer-wins;
- a disputed fact comes back with both candidates and no value of its own;
- put(None) expires (kept as history) for a principal that may curate; an agent's files an expiry request;
- LangMem's create_manage_memory_tool / create_search_memory_tool work over the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langmem import create_manage_memory_tool, create_search_memory_tool
from memory_governance import AsyncClient, Client, DisputeOpen, RevisionConflict
from memory_governance.langgraph_store import GovernedStore

from memory_admin.demo import seed_demo
from tests.test_client import Personas

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def personas(live_server: Any) -> Personas:
    return Personas(live_server.url)


PROJECT = "project-a"
NS = ("memories", "task-proposal-017")
KEY = "submission_deadline"
TASK = "task-system:project-a/task-proposal-017"


class State(TypedDict, total=False):
    write: dict[str, Any] | None
    seen: Annotated[list[Any], operator.add]
    notices: list[dict[str, Any]]


def remember(state: State, runtime: Runtime) -> dict[str, Any]:
    if state.get("write"):
        assert runtime.store is not None
        runtime.store.put(NS, KEY, state["write"])
    return {}


def recall(state: State, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    item = runtime.store.get(NS, KEY)
    return {"seen": [item.value if item else None]}


def refresh(state: State, runtime: Runtime) -> dict[str, Any]:
    """What a node does first on a new run: read the notices of what this agent loaded before."""
    store = runtime.store
    assert isinstance(store, GovernedStore)
    return {"notices": list(store.pending_notices())}


def graph(store: GovernedStore) -> Any:
    builder = StateGraph(State)
    builder.add_node("refresh", refresh)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "refresh")
    builder.add_edge("refresh", "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=store)


def store_for(personas: Personas, name: str = "agent-7", role: str = "agent", **kwargs: Any) -> GovernedStore:
    return GovernedStore(personas.base_url, personas.token(name, role), project_id=PROJECT, **kwargs)


def task_system_moves_the_deadline(personas: Personas, value: dict[str, Any], expected: int) -> None:
    """Another writer (the task system's agent) supersedes the fact between two runs."""
    with personas.client("task-system") as client:
        client.assert_fact(
            PROJECT,
            NS[1],
            KEY,
            value,
            valid_from=datetime.now(UTC),
            source_ref=TASK,
            source_revision="r18",
            expected_revision=expected,
        )


def test_a_fact_superseded_between_two_runs_is_not_current_on_the_second_and_the_agent_gets_a_notice(
    personas: Personas,
) -> None:
    store = store_for(personas)
    app = graph(store)

    first = app.invoke({"write": {"at": "2026-10-30T17:00+09:00"}})
    assert first["notices"] == []
    [seen] = first["seen"]
    assert seen["at"] == "2026-10-30T17:00+09:00"
    governance = seen["_governance"]
    assert governance["revision"] == 1 and governance["status"] == "accepted"
    assert governance["freshness"] == "never_verified" and governance["action_allowed"] is True
    assert "last_verified_at" in governance and "caveat" in governance
    old_memory = governance["memory_id"]

    task_system_moves_the_deadline(personas, {"at": "2026-11-02T17:00+09:00"}, expected=1)

    second = app.invoke({"write": None})
    assert [n["memory_id"] for n in second["notices"]] == [old_memory]  # the agent is told
    [seen] = second["seen"]
    assert seen["at"] == "2026-11-02T17:00+09:00"  # the old value is not returned as current
    assert seen["_governance"]["revision"] == 2 and seen["_governance"]["memory_id"] != old_memory

    store.acknowledge(second["notices"][0]["id"])
    assert store.pending_notices() == []


def test_a_put_on_a_stale_revision_surfaces_the_409(personas: Personas) -> None:
    store = store_for(personas)
    app = graph(store)
    app.invoke({"write": {"at": "Oct 30"}})  # the store read revision 1
    task_system_moves_the_deadline(personas, {"at": "Nov 2"}, expected=1)

    with pytest.raises(RevisionConflict) as caught:
        app.invoke({"write": {"at": "Oct 31"}})  # written against revision 1: refused, not last-writer-wins
    assert caught.value.status == 409 and caught.value.current is not None
    assert caught.value.current["revision"] == 2 and caught.value.current["value"] == {"at": "Nov 2"}
    with personas.client("agent-7") as client:
        assert client.current(PROJECT, NS[1], KEY)["value"] == {"at": "Nov 2"}

    # Reading again gives the store the current revision; the next put is a deliberate change on top of it.
    assert store.get(NS, KEY).value["at"] == "Nov 2"  # type: ignore[union-attr]
    store.put(NS, KEY, {"at": "Oct 31"})
    assert store.outcomes[-1].outcome == "created" and store.outcomes[-1].revision == 3


def test_a_disputed_fact_comes_back_with_both_candidates_and_no_value(personas: Personas) -> None:
    said = datetime.now(UTC) - timedelta(minutes=5)
    with personas.client("price-feed-a") as a, personas.client("price-feed-b") as b:
        a.assert_fact(
            PROJECT, "product-x", "unit_price", {"jpy": 980}, valid_from=said, source_ref="feed-a", source_revision="1"
        )
        answer = b.assert_fact(
            PROJECT, "product-x", "unit_price", {"jpy": 1080}, valid_from=said, source_ref="feed-b", source_revision="1"
        )
    assert answer["outcome"] == "disputed"

    store = store_for(personas)

    def read_price(state: State, runtime: Runtime) -> dict[str, Any]:
        item = runtime.store.get(("memories", "product-x"), "unit_price")  # type: ignore[union-attr]
        return {"seen": [item.value if item else None]}

    builder = StateGraph(State)
    builder.add_node("read", read_price)
    builder.add_edge(START, "read")
    builder.add_edge("read", END)
    [value] = builder.compile(store=store).invoke({})["seen"]

    governance = value.pop("_governance")
    assert value == {}  # no invented value
    assert governance["status"] == "disputed" and governance["dispute_id"] == answer["dispute_id"]
    assert governance["action_allowed"] is False and governance["caveat"]
    assert sorted(c["value"]["jpy"] for c in governance["candidates"]) == [980, 1080]
    with pytest.raises(DisputeOpen):  # a put cannot settle it either: an owner resolves disputes
        store.put(("memories", "product-x"), "unit_price", {"jpy": 1000})
    # The read showed the dispute; it leaves no notice about what it showed (issue 31).
    assert list(store.pending_notices()) == []


def test_a_put_that_lands_disputed_is_reported(personas: Personas) -> None:
    with personas.client("task-system") as other:
        # An equal-rank value that takes effect tomorrow: the store's put (effective now) cannot be ordered
        # against it, so both are kept and a dispute opens (202).
        other.assert_fact(
            PROJECT,
            NS[1],
            KEY,
            {"at": "Nov 2"},
            valid_from=datetime.now(UTC) + timedelta(days=1),
            source_ref=TASK,
            source_revision="x",
        )
    store = store_for(personas)
    assert store.get(NS, KEY) is None  # nothing is in effect yet
    store.put(NS, KEY, {"at": "Oct 30"})  # 202: both kept, an owner must resolve it
    outcome = store.outcomes[-1]
    assert outcome.outcome == "disputed" and outcome.dispute_id
    assert store.get(NS, KEY).value["_governance"]["status"] == "disputed"  # type: ignore[union-attr]


def test_delete_expires_and_keeps_history_and_an_agents_delete_asks_an_owner(personas: Personas) -> None:
    agent_store = store_for(personas)
    agent_store.put(NS, KEY, {"at": "Oct 30"})
    memory_id = agent_store.outcomes[-1].memory_id

    agent_store.delete(NS, KEY)  # an agent never expires on its own: it files a request, and nothing raises
    assert agent_store.outcomes[-1].outcome == "expiry_requested" and agent_store.outcomes[-1].request_id
    assert agent_store.get(NS, KEY) is not None

    owner_store = store_for(personas, "olivia", "owner")
    owner_store.delete(NS, KEY)
    assert owner_store.get(NS, KEY) is None and agent_store.get(NS, KEY) is None
    with personas.client("olivia", "owner") as client:
        kept = client.record(memory_id)
    assert kept["status"] == "expired" and kept["value"] == {"at": "Oct 30"}  # kept as history
    assert kept["status_reason"].startswith("Deleted through the LangGraph store")

    agent_store.put(NS, KEY, {"at": "Nov 2"})  # a new value after the delete, on top of the expired head
    assert agent_store.get(NS, KEY).value["at"] == "Nov 2"  # type: ignore[union-attr]


def test_search_returns_only_usable_values_with_governance(personas: Personas) -> None:
    store = store_for(personas)
    store.put(NS, KEY, {"at": "Oct 30", "text": "proposal submission deadline"})
    store.put(("memories", "sato"), "meeting_room", {"text": "Room 3 for the weekly meeting"})
    old = store.outcomes[0].memory_id
    task_system_moves_the_deadline(personas, {"at": "Nov 2", "text": "proposal submission deadline moved"}, expected=1)

    hits = store.search(("memories",), query="proposal submission deadline", limit=5)
    deadline = [h for h in hits if h.key == KEY]
    assert len(deadline) == 1 and deadline[0].value["at"] == "Nov 2"
    assert deadline[0].value["_governance"]["memory_id"] != old and deadline[0].namespace == NS
    # Found before their vector entries are written: keyword matches, which have no similarity to report.
    assert all(h.score is None for h in hits)

    mine = store.search(("memories", "sato"), query="meeting room")
    assert [h.key for h in mine] == ["meeting_room"] and mine[0].value["_governance"]["status"] == "accepted"
    assert store.search(("memories", "sato"), query="meeting room", filter={"text": "nope"}) == []
    listed = store.search(NS)  # no query: the subject's current facts
    assert [h.key for h in listed] == [KEY]
    assert set(store.list_namespaces(prefix=("memories",))) == {NS, ("memories", "sato")}


def test_a_namespaces_search_is_narrowed_by_the_server_to_its_subject(personas: Personas) -> None:
    """The namespace's subject goes to the server as `subject_id`: with limit=1, the one hit is this subject's even
    when other subjects' newer facts match the query better (they would fill k=1 and be dropped here)."""
    store = store_for(personas)
    store.put(("memories", "sato"), "meeting_room", {"text": "Room 3 for the weekly meeting"})
    for i in range(5):
        store.put(("memories", f"other-{i}"), "meeting_room", {"text": f"Room {i} for the weekly meeting room"})
    hits = store.search(("memories", "sato"), query="weekly meeting room", limit=1)
    assert [(h.namespace, h.value["text"]) for h in hits] == [(("memories", "sato"), "Room 3 for the weekly meeting")]
    assert store.search(("memories", "nobody"), query="weekly meeting room") == []


def test_search_takes_the_governance_facts_from_the_search_itself(personas: Personas, monkeypatch: Any) -> None:
    """One search call that registers the context load itself, no per-item facts/current; `_governance` as
    `get` gives it."""
    store = store_for(personas)
    store.put(NS, KEY, {"at": "Oct 30", "text": "proposal submission deadline"})
    store.put(("memories", "sato"), "meeting_room", {"text": "Room 3 for the proposal meeting"})
    expected = {
        (item.namespace, item.key): item.value
        for item in (store.get(NS, KEY), store.get(("memories", "sato"), "meeting_room"))
        if item
    }

    paths, answers = record_calls(monkeypatch)
    searches = (
        lambda: store.search(("memories",), query="proposal", limit=5),
        lambda: asyncio.run(store.asearch(("memories",), query="proposal", limit=5)),
    )
    for search in searches:
        hits = search()
        assert {(h.namespace, h.key): h.value for h in hits} == expected
        assert paths == ["search/"], paths
        load = answers[0]["context_load"]
        assert load["session_id"] == store.session_id and load["agent_id"] == "agent-7"
        paths.clear()
        answers.clear()


def record_calls(monkeypatch: Any, *, older_server: bool = False) -> tuple[list[str], list[Any]]:
    """The paths the client calls and the answers it gets. `older_server`: a server before reads took
    `session_id` (it ignores the parameter: here it is never sent)."""
    paths: list[str] = []
    answers: list[Any] = []
    sync_send, async_send = Client.send, AsyncClient.send

    def strip(call: Any) -> Any:
        if not older_server:
            return call
        params = {k: v for k, v in call.params.items() if k not in ("session_id", "context_expires_at")}
        return dataclasses.replace(call, params=params)

    def recorded(self: Client, call: Any) -> Any:
        paths.append(call.path)
        answers.append(sync_send(self, strip(call)))
        return answers[-1]

    async def arecorded(self: AsyncClient, call: Any) -> Any:
        paths.append(call.path)
        answers.append(await async_send(self, strip(call)))
        return answers[-1]

    monkeypatch.setattr(Client, "send", recorded)
    monkeypatch.setattr(AsyncClient, "send", arecorded)
    return paths, answers


@pytest.mark.parametrize("older_server", [False, True])
def test_get_registers_what_it_read_in_the_read_itself_or_after_it_on_an_older_server(
    personas: Personas, monkeypatch: Any, older_server: bool
) -> None:
    store = store_for(personas)
    store.put(NS, KEY, {"at": "2026-10-30T17:00+09:00"})
    paths, _ = record_calls(monkeypatch, older_server=older_server)
    item = store.get(NS, KEY)
    assert item is not None and item.value["at"] == "2026-10-30T17:00+09:00"
    assert asyncio.run(store.aget(NS, KEY)) is not None
    one = ["facts/current/", "context-loads/"] if older_server else ["facts/current/"]
    assert paths == one + one, paths
    monkeypatch.undo()

    task_system_moves_the_deadline(personas, {"at": "2026-11-02T17:00+09:00"}, expected=1)
    notices = store.pending_notices()
    assert [n["memory_id"] for n in notices] == [item.value["_governance"]["memory_id"]] * 2  # one per read


def test_the_async_api_runs_a_graph_too(personas: Personas) -> None:
    store = store_for(personas)
    app = graph(store)
    task_token = personas.token("task-system", "agent")

    async def runs() -> tuple[Any, Any]:
        first = await app.ainvoke({"write": {"at": "Oct 30"}})
        await asyncio.to_thread(_move_with, personas.base_url, task_token)
        second = await app.ainvoke({"write": None})
        return first, second

    first, second = asyncio.run(runs())
    assert first["seen"][0]["at"] == "Oct 30" and second["seen"][0]["at"] == "Nov 2"
    assert len(second["notices"]) == 1


def _move_with(base_url: str, token: str) -> None:
    with Client(base_url, token) as client:
        client.assert_fact(
            PROJECT,
            NS[1],
            KEY,
            {"at": "Nov 2"},
            valid_from=datetime.now(UTC),
            source_ref=TASK,
            source_revision="r18",
            expected_revision=1,
        )


def test_langmem_memory_tools_work_over_the_store(personas: Personas) -> None:
    store = store_for(personas)
    namespace = ("memories", "alice")
    manage = create_manage_memory_tool(namespace=namespace, store=store)
    search = create_search_memory_tool(namespace=namespace, store=store)

    created = manage.invoke({"content": "Alice prefers morning meetings", "action": "create"})
    memory_key = created.split()[-1]
    manage.invoke({"content": "Alice prefers afternoon meetings", "action": "update", "id": memory_key})
    # Searched at once, the vector entries still queued (no worker here): read-your-writes.
    found = json.loads(search.invoke({"query": "Alice meetings preference"}))
    assert [m["value"]["content"] for m in found] == ["Alice prefers afternoon meetings"]  # only the current one
    assert found[0]["key"] == memory_key and found[0]["value"]["_governance"]["revision"] == 2

    with personas.client("agent-7") as client:
        versions = list(client.records(project_id=PROJECT, subject_id="alice", predicate=memory_key))
    assert sorted(r["status"] for r in versions) == ["accepted", "superseded"]  # the update kept history

    owner_tool = create_manage_memory_tool(namespace=namespace, store=store_for(personas, "olivia", "owner"))
    assert owner_tool.invoke({"action": "delete", "id": memory_key}).startswith("Deleted")
    assert store.get(namespace, memory_key) is None  # expired, kept as history


def _docs_example(section: str) -> str:
    """The first ```python block of the section `section` of docs/integrations.md."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "integrations.md").read_text()
    body = page.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return body.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("section", ["Python client", "LangGraph store"])
def test_the_docs_examples_run_against_the_demo(section: str, live_server: Any, capsys: Any) -> None:
    """A newcomer's path: `make run`'s demo data and printed agent token, the docs' code as written."""
    token = seed_demo(subjects=10)["agent_token"]
    code = _docs_example(section).replace("http://127.0.0.1:8000", live_server.url)
    code = code.replace("mga_…the printed token…", token)
    exec(compile(code, f"docs/integrations.md ({section})", "exec"), {"__name__": "docs"})
    printed = capsys.readouterr().out
    assert "2026-11-02T17:00:00+09:00" in printed  # the moved deadline, as the demo tells it
