"""`langmem`: LangMem's memory tools over LangGraph's `InMemoryStore`, driven without a model.

LangMem gives an agent two tools: `manage_memory` (create, update or delete a memory by id) and `search_memory`
(search the memories of a namespace, with an optional filter on their content). Its instructions tell the agent to
update a memory it finds incorrect or outdated. The deterministic driver here does what those instructions ask of
a model: before remembering a fact it searches for a memory about the same subject and predicate and updates it if
there is one (creating one otherwise); to answer, it searches and takes the most recently updated hit; to forget a
subject, it deletes every memory about it. Summaries and plans are memories too. Every call goes through the
tools (`tool.invoke`), so what LangMem does with the store is what is scored. No model and no embedding index are
involved (LangMem's tools need neither: the search filters on content).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from langgraph.store.memory import InMemoryStore
from langmem import create_manage_memory_tool, create_search_memory_tool

from memory_admin.conformance.cases import Case
from memory_admin.conformance.source import SourceScript
from memory_admin.conformance.targets import Reading, Session, Target, iter_steps


class LangMemSession(Session):
    def __init__(self, case: Case) -> None:
        self.case = case
        self.store = InMemoryStore()
        namespace = ("memories", case.project)
        self.manage = create_manage_memory_tool(namespace=namespace, store=self.store, schema=dict)
        self.search = create_search_memory_tool(namespace=namespace, store=self.store)

    def _find(self, query: str, **content: str) -> list[dict[str, Any]]:
        """The memories whose content matches, the most recently updated first."""
        found = json.loads(self.search.invoke({"query": query, "filter": {"content": content}, "limit": 100}))
        return sorted(found, key=lambda m: m["updated_at"], reverse=True)

    def _remember(self, content: dict[str, Any], query: str, **same: str) -> None:
        existing = self._find(query, **same)
        if existing:
            self.manage.invoke({"action": "update", "id": existing[0]["key"], "content": content})
        else:
            self.manage.invoke({"action": "create", "content": content})

    def build(self) -> None:
        for kind, step in iter_steps(self.case):
            match kind:
                case "assert":
                    subject, predicate = step["subject"], step["predicate"]
                    content = {
                        "kind": "fact",
                        "subject": subject,
                        "predicate": predicate,
                        "value": step["value"],
                        "source": step["source"],
                        "revision": step["revision"],
                    }
                    self._remember(content, f"{subject} {predicate}", kind="fact", subject=subject, predicate=predicate)
                case "summary":
                    content = {"kind": "summary", "name": step["id"], "text": step["text"]}
                    self._remember(content, step["text"], kind="summary", name=step["id"])
                case "plan":
                    payload = step.get("payload") or {}
                    content = {"kind": "plan", "name": step["id"], "action": step["kind"], "payload": payload}
                    self._remember(content, step["kind"], kind="plan", name=step["id"])
                case "delete":
                    for memory in self._find(step["subject"], subject=step["subject"]):
                        self.manage.invoke({"action": "delete", "id": memory["key"]})
                case "load" | "source":
                    pass  # a loaded copy lives in the agent; LangMem never consults a source

    def read_fact(
        self,
        by: str,
        subject: str,
        predicate: str,
        *,
        purpose: str = "answer",
        valid_at: datetime | None = None,
        known_at: datetime | None = None,
    ) -> Reading:
        found = self._find(f"{subject} {predicate}", kind="fact", subject=subject, predicate=predicate)
        if not found:
            return Reading(stop="not_found", action_allowed=False, raw=[])
        value = found[0]["value"]["content"]["value"]
        return Reading(value=value, has_value=True, shown=[m["value"]["content"]["value"] for m in found], raw=found)

    def _item(self, kind: str, name: str, field: str) -> Reading:
        found = self._find(name, kind=kind, name=name)
        if not found:
            return Reading(stop="not_found", usable=False, raw=[])
        value = found[0]["value"]["content"][field]
        return Reading(value=value, has_value=True, shown=[value], raw=found)

    def read_summary(self, by: str, summary: str) -> Reading:
        return self._item("summary", summary, "text")

    def read_plan(self, by: str, plan: str) -> Reading:
        return self._item("plan", plan, "payload")

    def open_notices(self, by: str, load: str) -> list[str]:
        return []

    def acknowledge(self, by: str, load: str) -> None:
        pass


class LangMemTarget(Target):
    name = "langmem"
    label = "LangMem tools over InMemoryStore"
    description = "LangMem's manage/search memory tools as its instructions ask: update a memory found outdated."

    @contextmanager
    def session(self, case: Case, source: SourceScript, source_url: str) -> Iterator[Session]:
        session = LangMemSession(case)
        session.build()
        yield session
