"""`vector-ttl`: an AgentCore-like baseline — a plain vector store with a time to live, written here.

This is the memory many agent platforms offer (AWS Bedrock AgentCore Memory's records with an expiry are the
model): everything told is stored as a text with its embedding under a namespace and a key, the newest write
wins per key, and an entry expires a fixed time (`TTL`) after it was written. There are no revisions, no valid
or record time, no sources, no field policies and no notices. A question is a similarity search for
"subject predicate" in the subject's namespace, and the best live hit answers; summaries and plans are entries
read back by their key; forgetting a subject drops its namespace.

The embedding is token hashing (no model, the same in every process) of what a question names — the fact's
subject and predicate — with the value kept beside it, so a miss is the store's design, not a weak embedding: a
hashed "person-sato meeting_time" finds the meeting time, not the room.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from memory_admin.conformance.cases import Case
from memory_admin.conformance.source import SourceScript
from memory_admin.conformance.targets import Reading, Session, Target, iter_steps

TTL = timedelta(days=90)
DIMENSIONS = 256
Key = tuple[str, str, str]  # (project, namespace, key)


def embed(text: str) -> list[float]:
    """A unit vector of the text's hashed word counts."""
    vector = [0.0] * DIMENSIONS
    for token in re.findall(r"[a-z0-9]+", text.lower()):
        vector[int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "big") % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


@dataclass
class Entry:
    text: str
    vector: list[float]
    value: Any
    expires_at: datetime


class VectorStore:
    def __init__(self, ttl: timedelta = TTL) -> None:
        self.ttl = ttl
        self.entries: dict[Key, Entry] = {}

    def put(self, key: Key, text: str, value: Any, written_at: datetime) -> None:
        """Store `value` under `key`, found by `text`; the newest write wins."""
        self.entries[key] = Entry(text, embed(text), value, written_at + self.ttl)

    def get(self, key: Key, now: datetime) -> Entry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and entry.expires_at > now else None

    def search(self, project: str, namespace: str, query: str, now: datetime, k: int = 3) -> list[tuple[float, Entry]]:
        wanted = embed(query)
        hits = [
            (sum(a * b for a, b in zip(wanted, entry.vector, strict=True)), entry)
            for (p, ns, _), entry in self.entries.items()
            if p == project and ns == namespace and entry.expires_at > now
        ]
        return sorted((h for h in hits if h[0] > 0), key=lambda h: -h[0])[:k]

    def drop(self, project: str, namespace: str) -> None:
        for key in [k for k in self.entries if k[:2] == (project, namespace)]:
            del self.entries[key]


class VectorSession(Session):
    def __init__(self, case: Case) -> None:
        self.case = case
        self.store = VectorStore()

    def build(self) -> None:
        project, now = self.case.project, timezone.now()
        for kind, step in iter_steps(self.case):
            match kind:
                case "assert":
                    text = f"{step['subject']} {step['predicate']}"
                    written = self.case.at(step["told_at"])
                    self.store.put((project, step["subject"], step["predicate"]), text, step["value"], written)
                case "summary":
                    self.store.put((project, "summaries", step["id"]), step["text"], step["text"], now)
                case "plan":
                    payload = step.get("payload") or {}
                    self.store.put((project, "plans", step["id"]), f"{step['kind']} {payload}", payload, now)
                case "delete":
                    self.store.drop(project, step["subject"])
                case "load" | "source":
                    pass  # a loaded copy lives in the agent; the store never consults a source

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
        hits = self.store.search(self.case.project, subject, f"{subject} {predicate}", timezone.now())
        if not hits:
            return Reading(stop="not_found", action_allowed=False, raw={"hits": []})
        raw = {"hits": [{"score": round(score, 4), "text": e.text, "value": e.value} for score, e in hits]}
        value = hits[0][1].value
        return Reading(value=value, has_value=True, shown=[e.value for _, e in hits], raw=raw)

    def _item(self, namespace: str, key: str) -> Reading:
        entry = self.store.get((self.case.project, namespace, key), timezone.now())
        if entry is None:
            return Reading(stop="not_found", usable=False)
        return Reading(value=entry.value, has_value=True, shown=[entry.value], raw={"text": entry.text})

    def read_summary(self, by: str, summary: str) -> Reading:
        return self._item("summaries", summary)

    def read_plan(self, by: str, plan: str) -> Reading:
        return self._item("plans", plan)

    def open_notices(self, by: str, load: str) -> list[str]:
        return []

    def acknowledge(self, by: str, load: str) -> None:
        pass


class VectorTTLTarget(Target):
    name = "vector-ttl"
    label = "Vector store with TTL (AgentCore-like)"
    description = "Store everything, newest write per key wins, entries expire 90 days after writing; no revisions."

    @contextmanager
    def session(self, case: Case, source: SourceScript, source_url: str) -> Iterator[Session]:
        session = VectorSession(case)
        session.build()
        yield session
