"""`langgraph-inmemory`: the baseline an agent would otherwise have — LangGraph's own `InMemoryStore`, used
the way its documentation shows.

Memories live under a namespace tuple and a key (`store.put(namespace, key, value)`; a later `put` overwrites),
are read back with `store.get` / `store.search`, and forgotten with `store.delete`. Here the namespace is
(project, subject) and the key the predicate; summaries and plans are items under (project, "summaries") and
(project, "plans"). The store has no time axes, no sources or policies, no recheck and no notices: it answers
what was put last.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from langgraph.store.memory import InMemoryStore

from memory_admin.conformance.cases import Case
from memory_admin.conformance.source import SourceScript
from memory_admin.conformance.targets import Reading, Session, Target, iter_steps


class InMemorySession(Session):
    def __init__(self, case: Case) -> None:
        self.case = case
        self.store = InMemoryStore()

    def build(self) -> None:
        project = self.case.project
        for kind, step in iter_steps(self.case):
            match kind:
                case "assert":
                    self.store.put(
                        (project, step["subject"]),
                        step["predicate"],
                        {"value": step["value"], "source": step["source"], "revision": step["revision"]},
                    )
                case "summary":
                    self.store.put((project, "summaries"), step["id"], {"text": step["text"]})
                case "plan":
                    self.store.put(
                        (project, "plans"),
                        step["id"],
                        {"kind": step["kind"], "payload": step.get("payload") or {}, "due_at": step["due_at"]},
                    )
                case "delete":
                    # Forget the subject: every item under its namespace.
                    for item in self.store.search((project, step["subject"]), limit=1000):
                        self.store.delete(tuple(item.namespace), item.key)
                case "load" | "source":
                    pass  # the loaded copy lives in the agent; the store never consults a source

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
        item = self.store.get((self.case.project, subject), predicate)
        if item is None:
            return Reading(stop="not_found", action_allowed=False)
        value = item.value["value"]
        return Reading(value=value, has_value=True, shown=[value], raw=dict(item.value))

    def _item(self, namespace: str, key: str, value_of: Any) -> Reading:
        item = self.store.get((self.case.project, namespace), key)
        if item is None:
            return Reading(stop="not_found", usable=False)
        return Reading(value=value_of(item.value), has_value=True, shown=[value_of(item.value)], raw=dict(item.value))

    def read_summary(self, by: str, summary: str) -> Reading:
        return self._item("summaries", summary, lambda v: v["text"])

    def read_plan(self, by: str, plan: str) -> Reading:
        return self._item("plans", plan, lambda v: v["payload"])

    def open_notices(self, by: str, load: str) -> list[str]:
        return []

    def acknowledge(self, by: str, load: str) -> None:
        pass


class LangGraphInMemoryTarget(Target):
    name = "langgraph-inmemory"
    label = "LangGraph InMemoryStore"
    description = "langgraph's InMemoryStore as its docs use it: put overwrites, get/search return what matches."

    @contextmanager
    def session(self, case: Case, source: SourceScript, source_url: str) -> Iterator[Session]:
        session = InMemorySession(case)
        session.build()
        yield session
