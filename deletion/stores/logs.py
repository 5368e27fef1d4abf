"""Raw conversation events: the lines about the scope are redacted, a marker stays."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import CharField, Exists, F, Func, OuterRef, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from deletion.stores.base import Found, Job, Scope, ScopeRecord, Store, Verification, register
from memory_admin.derived.models import Event, EventHide, EventSubject, naming
from memory_admin.lib import rows
from memory_admin.memory.models import MemoryRecord

# A log line that names no subject but quotes a deleted value (PRODUCT.md rule 12: raw logs are a copy).
# Tombstones keep only keyed hashes, which cannot be matched against free text, so the lines are found
# while the records still exist, at acceptance: untagged lines of the project whose text contains one of
# the records' string values. Bounded, so a big subject stays a few statements and short values ("yes",
# "Room 3") do not take unrelated lines with them; lines tagged with another subject are that subject's.
QUOTE_MIN_CHARS, QUOTE_MAX_CHARS = 8, 1000
QUOTE_MAX_VALUES = 200  # current values first, then the longest
QUOTE_CHUNK = 50  # LIKE conditions per statement
UNTAGGED_CHUNK = 5000  # untagged line ids per statement (SQLite allows 32,766 parameters)

# Which logs this store answers for, named in every verification (the report shows them): the product's
# event lines are redacted here; the server's own logs are kept free of content by configuration instead
# (docs/operations.md "What is logged"), so there is nothing of the subject in them to delete.
LOG_STORES = {
    "covered": ["events: raw conversation lines the agents sent (this store redacts them)"],
    "not_covered": [
        "web server access logs (gunicorn, runserver): paths and status only, no query strings or bodies",
        "application error logs (django.request): path, exception type and frames, no request or message",
        "worker logs (Celery): task names and ids, no arguments or results",
    ],
    "why_not_covered": "configured to carry no memory content; see docs/operations.md 'What is logged'",
}


def _strings(value: Any) -> list[str]:
    """The strings in a JSON value (itself, or the leaves of its lists and objects)."""
    if isinstance(value, str):
        return [value.strip()]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def quoted_values(records: Sequence[ScopeRecord | MemoryRecord]) -> tuple[list[str], int]:
    """The records' string values to look for in untagged log lines, and how many the bound left out."""
    heads: set[str] = set()
    found: set[str] = set()
    for record in records:
        strings = {s for s in _strings(record.value) if QUOTE_MIN_CHARS <= len(s) <= QUOTE_MAX_CHARS}
        found |= strings
        if record.is_head:
            heads |= strings
    ranked = sorted(found, key=lambda s: (s not in heads, -len(s), s))
    return ranked[:QUOTE_MAX_VALUES], max(0, len(ranked) - QUOTE_MAX_VALUES)


def lines_quoting_values(scope: Scope) -> tuple[list[int], dict[str, int]]:
    """Ids of the project's lines that name no subject and quote one of the scope's values; with counts
    (never the values: targets and evidence stay content-free)."""
    values, left_out = quoted_values(scope.records)
    # The tags compared with are the project's own (tenant and project are copied onto each tag): unbounded,
    # the anti-join hashed every tenant's tags, so one tenant's log volume slowed another's deletion.
    tags = EventSubject.objects.filter(tenant_id=scope.tenant_id, project_id=scope.project_id, event_id=OuterRef("pk"))
    untagged = Event.objects.filter(tenant_id=scope.tenant_id, project_id=scope.project_id).filter(~Exists(tags))
    # The untagged lines first (an anti-join on the tag index), then the LIKE conditions on those only:
    # in one statement the planner ran every LIKE on every line of the project before the anti-join
    # (4 x 2.3 s for 100k tagged lines and 200 values), and most lines carry a tag.
    candidates = list(untagged.values_list("id", flat=True)) if values else []
    ids: set[int] = set()
    for first in range(0, len(candidates), UNTAGGED_CHUNK):
        lines = Event.objects.filter(pk__in=candidates[first : first + UNTAGGED_CHUNK])
        for start in range(0, len(values), QUOTE_CHUNK):
            q = Q()
            for value in values[start : start + QUOTE_CHUNK]:
                q |= Q(text__contains=value)
            ids |= set(lines.filter(q).values_list("id", flat=True))
    return sorted(ids), {"values_searched": len(values), "values_left_out": left_out, "lines": len(ids)}


def _source_event_ids(scope: Scope) -> Any:
    """The public ids of the lines the scope's records were extracted from: a subquery over the scope's
    records on PostgreSQL (kept apart from the subject's conditions: inside one OR the planner ran it once
    per line, unhashed, since it cannot estimate how many ids a record's array holds); a list elsewhere."""
    if connection.vendor != "postgresql":
        return sorted({e for r in scope.records for e in r.source_event_ids})
    elements = Func(F("source_event_ids"), function="jsonb_array_elements_text", output_field=CharField())
    return scope.records_query().annotate(source_event_id=elements).values("source_event_id")


@register
class LogsStore(Store):
    """Raw conversation events: the matching lines are redacted, a marker stays."""

    name = "logs"
    position = 20
    replayed = True

    def _matching(self, tenant_id: int, project_id: int, subjects: list[str], event_ids: list[str]) -> Any:
        """Lines the records were extracted from, and lines naming the subject (`derived.models.naming`: tagged
        or in the text)."""
        q = Q(public_id__in=event_ids) | naming(tenant_id, project_id, subjects)
        return Event.objects.filter(tenant_id=tenant_id, project_id=project_id).filter(q)

    def find(self, scope: Scope) -> Found:
        event_ids = sorted({e for r in scope.records for e in r.source_event_ids})
        events = self._matching(scope.tenant_id, scope.project_id, scope.subjects, event_ids)
        ids = list(events.values_list("id", flat=True))
        samples = list(events.values_list("public_id", flat=True)[:5])
        quoting, counts = lines_quoting_values(scope)
        ids += sorted(set(quoting) - set(ids))
        return Found(
            len(ids),
            {"ids": ids, "subjects": scope.subjects, "event_ids": event_ids, "untagged_lines_quoting_values": counts},
            samples,
        )

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        """The lines `find` will target, hidden by the same conditions, so no list of the subject's line ids is
        built at acceptance:
        - the lines naming the subject (tagged, or in the text): by one `EventHide` rule per subject, named by
          the request (`request_public_id`, which acceptance sets), up to the project's newest line, instead of
          an UPDATE of each line (most of the acceptance's time for a subject with 100,000 lines);
        - the lines the records were extracted from: one UPDATE joined to the records' `source_event_ids` (on
          PostgreSQL; SQLite takes their list);
        - the few untagged lines quoting a value: an UPDATE by their ids.
        Answers how many lines are hidden now, those under the rules counted (one count, no row written)."""
        events = Event.objects.filter(tenant_id=scope.tenant_id, project_id=scope.project_id)
        by_rule = Q(pk__in=[])  # the lines the rules below hide, in the set form
        hidden = 0
        if scope.subjects:
            through = events.order_by("-pk").values_list("pk", flat=True).first()
            if through is not None:
                EventHide.objects.bulk_create(
                    EventHide(
                        tenant_id=scope.tenant_id,
                        project_id=scope.project_id,
                        subject_id=subject,
                        through_event_id=through,
                        hidden_by=scope.request_public_id,
                        created_at=now,
                    )
                    for subject in scope.subjects
                )
                by_rule = Q(pk__lte=through) & naming(scope.tenant_id, scope.project_id, scope.subjects)
                hidden = events.filter(by_rule, hidden_at__isnull=True, redacted_at__isnull=True).count()
        sources = events.filter(public_id__in=_source_event_ids(scope), hidden_at__isnull=True).exclude(by_rule)
        hidden += sources.update(hidden_at=now)
        quoting, _ = lines_quoting_values(scope)
        if quoting:
            hidden += (
                Event.objects.filter(pk__in=quoting, hidden_at__isnull=True).exclude(by_rule).update(hidden_at=now)
            )
        return hidden

    def purge(self, job: Job) -> int:
        """Redact the target lines (hidden row by row too, if a rule hid them) and delete the request's rules
        (`EventHide`), in one transaction: once the lines no longer hold the subject, neither does the rule."""
        ids = rows.among(job.targets["ids"])
        with transaction.atomic():
            # The tags go with the text: a redacted line names no subject, in its row or in the index.
            EventSubject.objects.filter(event_id__in=ids).delete()
            now = timezone.now()
            redacted = Event.objects.filter(pk__in=ids, redacted_at__isnull=True).update(
                text=job.redaction, subject_ids=[], redacted_at=now, hidden_at=Coalesce("hidden_at", Value(now))
            )
            EventHide.objects.filter(tenant_id=job.tenant_id, hidden_by=job.request_public_id).delete()
            return redacted

    def verify(self, job: Job) -> Verification:
        t = job.targets
        remaining = self._matching(job.tenant_id, job.project_id, t["subjects"], [])
        remaining = remaining.filter(redacted_at__isnull=True).count()
        ids = rows.among(t["ids"])
        unredacted = Event.objects.filter(pk__in=ids, redacted_at__isnull=True).count()
        tags = EventSubject.objects.filter(event_id__in=ids).count()
        rules = EventHide.objects.filter(tenant_id=job.tenant_id, hidden_by=job.request_public_id).count()
        return Verification(
            remaining + unredacted + tags + rules,
            {
                "query": "events of the project whose text or subject tags name the scope's subject",
                "lines_mentioning_scope": remaining,
                "target_lines_unredacted": unredacted,
                "target_subject_tags": tags,
                "hiding_rules_left": rules,
                "redacted_with_marker": Event.objects.filter(pk__in=ids, redacted_at__isnull=False).count(),
                "log_stores": LOG_STORES,
            },
        )
