"""Retrieval as an agent sees it: top-k from the vector index, merged with the records not yet embedded, filtered
to usable records by default.

What a hit's `score` and `rank` mean (docs/retrieval.md, the one place they are documented):

* A hit the index proposed (`match="vector"`) scores the cosine similarity of the query's and the record's
  embeddings, in [-1, 1], higher is closer (LanceDB answers the cosine distance 1 - cos; `vectors.Hit` turns it
  back). 0 is "nothing in common" (the hashing fallback gives exactly 0 to texts sharing no word); a real model
  rarely goes below 0.3 for texts of the same language, so compare scores within one answer, not across embedders.
* A record whose vector entry is not written yet (`derived.models.PendingVector`: written in the same second, its
  embedding still queued) is matched from the database by the query's words (`keyword_terms`) in its subject,
  predicate and value (`match="keyword"`); it has no embedding to compare, so its score is null.
* The two lists are merged by reciprocal-rank fusion: a hit's place in its own list r (1-based: by score, or by
  how many of the query's words it contains, newest first) gives it 1 / (60 + r); the answer is ordered by that,
  a keyword match first on a tie (it contains the words; the index proposes its nearest rows however far they
  are). A record in both lists (indexed, and marked again by a later change) counts once, as indexed.
* `rank` is the hit's 1-based place in the answer: what a person is shown; agents get `score` and `match` too.

Filters (`project_id`, `subject_id`, `predicate`) are pushed into the index query as the matching records' ids
(resolved in the database, up to `PUSHDOWN_MAX_IDS`) and always re-checked on the records the database returns.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, Case, IntegerField, Q, TextField, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.derived.models import PendingVector
from memory_admin.derived.vectors import get_index
from memory_admin.lib import sealing
from memory_admin.memory.models import MemoryRecord, RecordQuerySet
from memory_admin.memory.reads import FactView, record_views

# Hits are over-fetched before the database check, so held-back copies do not shrink the answer.
OVERFETCH = 4
# A subject or predicate filter is sent to the index as the ids of its records when it has at most this many
# (a subject's history is a few dozen); a broader one is applied to an index answer OVERFETCH x wider.
PUSHDOWN_MAX_IDS = 2000
# Keyword matching reads at most the tenant's newest PENDING_SCAN records not yet embedded (a bulk import queues
# faster than a model embeds: its newest writes are the ones an agent asks about next), with at most
# MAX_TERMS words of the query.
PENDING_SCAN = 5_000
MAX_TERMS = 12
# Reciprocal-rank fusion's constant (the usual 60: a hit's share falls slowly with its place in its list).
RRF_K = 60

Status = MemoryRecord.Status


class Match:
    """How a hit was found (the API's `match`)."""

    VECTOR = "vector"  # proposed by the vector index; `score` is its cosine similarity
    KEYWORD = "keyword"  # not embedded yet, matched from the database by the query's words; no score


@dataclass
class SearchHit:
    record: MemoryRecord
    score: float | None  # cosine similarity for a vector hit, None for a keyword hit (see the module doc)
    usable: bool
    current: MemoryRecord | None  # the fact's current record, when this hit is not it
    # Why the hit is held back (None when usable): a code from REASONS and a sentence a person can read.
    reason_code: str | None = None
    reason: str | None = None
    # For a usable hit whose successor is already recorded: the successor, in effect from `record.valid_to`.
    next: MemoryRecord | None = None
    # For a usable hit: what `GET /facts/current/` says of it (freshness, caveat, action allowed), by the
    # same rule (`reads.record_views`); None for a held-back hit.
    view: FactView | None = None
    match: str = Match.VECTOR
    rank: int = 0  # 1-based place in its list of the answer (results, or held_back)


@dataclass
class SearchResult:
    results: list[SearchHit]
    held_back: list[SearchHit]  # copies the usable filter kept from the agent, each with its reason
    # Index entries whose record no read path returns any more (tombstoned by a deletion, or purged):
    # counted, never shown, so a deleted memory's id or value cannot leak through the preview.
    dropped: int = 0


@dataclass(frozen=True)
class Filters:
    """What a search is narrowed to; every door passes the same three (None: no filter)."""

    project_id: str | None = None
    subject_id: str | None = None
    predicate: str | None = None

    def admit(self, record: MemoryRecord) -> bool:
        """The re-check on the database's row, whatever the index proposed."""
        return (
            (self.project_id is None or record.project.key == self.project_id)
            and (self.subject_id is None or record.subject_id == self.subject_id)
            and (self.predicate is None or record.predicate == self.predicate)
        )

    def narrow(self, records: RecordQuerySet, tenant_id: int) -> RecordQuerySet:
        if self.project_id is not None:
            records = records.in_project(tenant_id, self.project_id)
        if self.subject_id is not None:
            records = records.filter(subject_id=self.subject_id)
        if self.predicate is not None:
            records = records.filter(predicate=self.predicate)
        return records


def search(
    principal: Principal,
    *,
    project_id: str | None,
    q: str,
    k: int,
    include_all: bool = False,
    now: datetime | None = None,
    subject_id: str | None = None,
    predicate: str | None = None,
) -> SearchResult:
    """The index proposes, with the records not embedded yet; the database decides, at the query time `now`.

    A hit is usable only if its record is the current belief at `now` (accepted and valid then), whatever
    the index entry's stored flag says. So an entry not yet refreshed after a change never hands a stale
    value to an agent, and a value whose successor is not in effect yet is still today's answer even
    before (or without) the valid-time transition task re-marking the index. A record written a moment ago is
    found by its words before its entry is written (read-your-writes), held back by the same rule.
    """
    now = now or timezone.now()
    tenant_id: int = principal.tenant_pk
    filters = Filters(project_id=project_id, subject_id=subject_id, predicate=predicate)
    wanted = k * OVERFETCH
    object_ids = _pushed_down_ids(tenant_id, filters)
    if object_ids is None and (subject_id is not None or predicate is not None):
        wanted *= OVERFETCH  # a broad filter, applied after the index answered: ask for more
    hits = get_index().search(
        tenant_id=tenant_id,
        project_id=project_id,
        text=q,
        k=wanted,
        usable_only=False,
        kind="record",
        object_ids=object_ids,
    )
    by_id = {
        r.memory_id: r
        for r in MemoryRecord.objects.filter(
            tenant_id=principal.tenant_id, memory_id__in=[h.object_id for h in hits]
        ).select_related("project", "issuer", "superseded_by")
    }
    dropped = sum(1 for h in hits if h.object_id not in by_id)
    # (fusion key, record, score, match): the lower the key, the better
    ranked: list[tuple[tuple[float, int], MemoryRecord, float | None, str]] = []
    seen: set[str] = set()
    place = 0
    for h in hits:
        record = by_id.get(h.object_id)
        if record is None or not filters.admit(record) or record.memory_id in seen:
            continue
        place += 1
        seen.add(record.memory_id)
        ranked.append(((-1.0 / (RRF_K + place), 1), record, h.score, Match.VECTOR))
    keyword = [r for r in pending_matches(tenant_id, filters, q, limit=k * OVERFETCH) if r.memory_id not in seen]
    for place, record in enumerate(keyword, start=1):
        ranked.append(((-1.0 / (RRF_K + place), 0), record, None, Match.KEYWORD))
    ranked.sort(key=operator.itemgetter(0))
    currents = _current_of([record for _, record, _, _ in ranked], now)
    hits_in_order: list[SearchHit] = []
    for _, record, score, match in ranked:
        if record.is_current_at(now):
            hit = SearchHit(record=record, score=score, usable=True, current=None, next=_successor(record), match=match)
        else:
            code, reason = held_back_reason(record, now)
            hit = SearchHit(
                record=record,
                score=score,
                usable=False,
                current=currents.get(_fact(record)),
                reason_code=code,
                reason=reason,
                match=match,
            )
        hits_in_order.append(hit)
    if include_all:
        results = hits_in_order[:k]
        _attach_views(results, now)
        return SearchResult(results=_ranked(results), held_back=[], dropped=dropped)
    usable = [h for h in hits_in_order if h.usable][:k]
    _attach_views(usable, now)
    held_back = [h for h in hits_in_order if not h.usable][:k]
    return SearchResult(results=_ranked(usable), held_back=_ranked(held_back), dropped=dropped)


def _ranked(hits: list[SearchHit]) -> list[SearchHit]:
    for rank, hit in enumerate(hits, start=1):
        hit.rank = rank
    return hits


def _pushed_down_ids(tenant_id: int, filters: Filters) -> list[str] | None:
    """The memory ids a subject or predicate filter leaves (newest first, history included), for the index's
    prefilter; None when there is no such filter or it leaves more than PUSHDOWN_MAX_IDS."""
    if filters.subject_id is None and filters.predicate is None:
        return None
    records = filters.narrow(MemoryRecord.objects.filter(tenant_id=tenant_id), tenant_id)
    ids = list(records.order_by("-id").values_list("memory_id", flat=True)[: PUSHDOWN_MAX_IDS + 1])
    return ids if len(ids) <= PUSHDOWN_MAX_IDS else None


# --- Keyword matching of the records not embedded yet -----------------------------------------------------

_WORD_RE = re.compile(r"\w+")
# Scripts written without spaces: a run of these is split into character bigrams (a single character kept).
_CJK_RE = re.compile(
    "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f]+"
)


def keyword_terms(q: str) -> list[str]:
    """The words of a query that keyword matching looks for: NFKC, lower case, `\\w` runs; runs of CJK characters
    as character bigrams; one-letter words left out (they occur in nearly every value); at most MAX_TERMS."""
    text = unicodedata.normalize("NFKC", q).lower()
    terms: list[str] = []
    for run in _WORD_RE.findall(text):
        pos = 0
        for cjk in _CJK_RE.finditer(run):
            if cjk.start() > pos:
                terms.append(run[pos : cjk.start()])
            chars = cjk.group()
            terms.extend([chars] if len(chars) == 1 else [a + b for a, b in itertools.pairwise(chars)])
            pos = cjk.end()
        if pos < len(run):
            terms.append(run[pos:])
    kept = [t for t in dict.fromkeys(terms) if len(t) >= 2 or _CJK_RE.fullmatch(t)]
    return kept[:MAX_TERMS]


def _term_condition(term: str) -> Q:
    """The record contains `term` in its subject, predicate or value (JSON text). Django's `icontains` escapes
    LIKE's wildcards (`%`, `_`, `\\`) in the term. SQLite keeps JSON with `\\u` escapes of non-ASCII text, so the
    escaped spelling is matched there too."""
    condition = Q(subject_id__icontains=term) | Q(predicate__icontains=term) | Q(value_text__icontains=term)
    escaped = json_escaped(term)
    if escaped != term:
        condition |= Q(value_text__icontains=escaped)
    return condition


def json_escaped(term: str) -> str:
    """`term` as `json.dumps` writes it inside a string with its default `ensure_ascii`."""
    return json.dumps(term)[1:-1]


def pending_matches(tenant_id: int, filters: Filters, q: str, *, limit: int) -> list[MemoryRecord]:
    """The tenant's records not embedded yet that contain words of `q`, best first: more of the query's words,
    then the newest. Read through the live manager (a deletion's hiding applies) with the tenant named, so the
    application's filter holds where the database has no row-level security (SQLite)."""
    terms = keyword_terms(q)
    if not terms or limit <= 0:
        return []
    # The ids first (an index-only scan, and nothing more when none is pending, as is usual): given as a subquery,
    # PostgreSQL may match the words against every record of the tenant before joining the few pending ones.
    pending = list(
        PendingVector.objects.filter(tenant_id=tenant_id)
        .order_by("-record_id")
        .values_list("record_id", flat=True)[:PENDING_SCAN]
    )
    if not pending:
        return []
    records = MemoryRecord.objects.filter(tenant_id=tenant_id)
    if connection.vendor == "postgresql":
        # One array parameter: an IN list of thousands of ids cost more to send and plan than the match (measured).
        table = MemoryRecord._meta.db_table
        records = records.annotate(
            pending=RawSQL(f'"{table}"."id" = ANY(%s::bigint[])', (pending,), output_field=BooleanField())
        ).filter(pending=True)
    else:
        records = records.filter(pk__in=pending)
    if sealing.enabled():
        return _matched_in_python(filters.narrow(records, tenant_id), terms, limit)
    records = filters.narrow(records, tenant_id).annotate(value_text=Cast("value", output_field=TextField()))
    conditions = [_term_condition(t) for t in terms]
    matched = functools.reduce(
        operator.add,
        [Case(When(c, then=Value(1)), default=Value(0), output_field=IntegerField()) for c in conditions],
    )
    return list(
        records.filter(functools.reduce(operator.or_, conditions))
        .annotate(matched=matched)
        .order_by("-matched", "-id")
        .select_related("project", "issuer", "superseded_by")[:limit]
    )


def _matched_in_python(records: RecordQuerySet, terms: list[str], limit: int) -> list[MemoryRecord]:
    """`pending_matches`'s ranking when values are sealed (lib.sealing): the database holds ciphertext, so the
    pending records (at most PENDING_SCAN) are read, opened, and matched here on the same text — subject,
    predicate and the value's JSON — case-insensitively."""
    scored = []
    for record in records.select_related("project", "issuer", "superseded_by"):
        text = " ".join(
            (record.subject_id, record.predicate, json.dumps(record.value, ensure_ascii=False, default=str))
        ).lower()
        matched = sum(1 for term in terms if term in text)
        if matched:
            scored.append((-matched, -record.pk, record))
    scored.sort(key=lambda item: item[:2])
    return [record for _, _, record in scored[:limit]]


def _attach_views(hits: list[SearchHit], now: datetime) -> None:
    """The governance facts of the usable hits returned, in a constant number of queries."""
    views = record_views([h.record for h in hits if h.usable], now)
    for hit in hits:
        hit.view = views.get(hit.record.pk) if hit.usable else None


# Codes of `SearchHit.reason_code` (the API's `reason_code`).
REASONS = ("superseded", "excluded", "expired", "disputed", "not_yet_in_effect", "tombstoned")


def held_back_reason(record: MemoryRecord, now: datetime) -> tuple[str, str]:
    """Why `record` is not handed to an agent at `now`: a code from REASONS and a readable sentence."""
    successor = record.superseded_by
    if record.status == Status.ACCEPTED:
        if record.valid_from > now:
            return "not_yet_in_effect", f"Not yet in effect: takes effect {record.valid_from.isoformat()}."
        # Accepted, but its validity has ended; the transition task has not settled it yet.
        if successor is not None:
            return "superseded", f"Superseded by {successor.memory_id} from {_iso(record.valid_to)}."
        return "expired", f"Expired: its validity ended {_iso(record.valid_to)}."
    if record.status == Status.SUPERSEDED:
        return "superseded", f"Superseded by {successor.memory_id}." if successor is not None else "Superseded."
    if record.status == Status.EXCLUDED:
        why = record.status_reason or "kept, but never put into an agent's context"
        return "excluded", f"Excluded: {why}"
    if record.status == Status.EXPIRED:
        return "expired", f"Expired: its validity ended {_iso(record.valid_to)}."
    if record.status == Status.DISPUTED:
        return "disputed", "Disputed: sources disagree and no rule orders them; an owner must resolve it."
    # A tombstoned record never reaches here through the live manager; kept so every status has a reason.
    return "tombstoned", "Tombstoned by a deletion request."


def _iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "(unknown)"


def _successor(record: MemoryRecord) -> MemoryRecord | None:
    """The recorded successor of a usable record: it takes over when `record.valid_to` passes."""
    successor = record.superseded_by
    return successor if successor is not None and record.valid_to is not None else None


def _fact(record: MemoryRecord) -> tuple[int, str, str]:
    return (record.project_id, record.subject_id, record.predicate)


def _current_of(records: list[MemoryRecord], now: datetime) -> dict[tuple[int, str, str], MemoryRecord]:
    """The current record at `now` of each fact that a held-back hit belongs to (usable hits are their own)."""
    held = [r for r in records if not r.is_current_at(now)]
    if not held:
        return {}
    facts = Q()
    for project_id, subject_id, predicate in {_fact(r) for r in held}:
        facts |= Q(project_id=project_id, subject_id=subject_id, predicate=predicate)
    currents = MemoryRecord.objects.filter(tenant_id=held[0].tenant_id).current(now).filter(facts)
    return {_fact(r): r for r in currents}
