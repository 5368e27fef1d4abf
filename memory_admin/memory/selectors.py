"""Reads of the memory layer that pages show, each in a fixed number of queries whatever the number of rows or
policies (a page's panel calls one of these). Selectors only read: none writes, audits or decides a rule
(the rules stay in policies, reads, rechecks); they import nothing above the memory layer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Case, Count, IntegerField, OuterRef, Q, QuerySet, Subquery, When

from memory_admin.accounts.models import Principal
from memory_admin.memory import audit, receipts
from memory_admin.memory.models import AuditEvent, Dispute, FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.policies import policies_for
from memory_admin.memory.reads import FRESHNESS_LABELS

# Audit events are shown by the time they happened (`at`, which a domain action may set to its own `now`),
# not by insertion; the id breaks ties. The audit page's keyset cursor follows the same order.
AUDIT_ORDER = ("-at", "-id")


# --- Disputes -------------------------------------------------------------------------------------------


def _written_order(record: MemoryRecord) -> int:
    return int(record.pk)


def open_disputes(tenant_id: int, *, limit: int = 10) -> list[Dispute]:
    """The oldest open disputes, each with its project and `n`, how many candidates disagree."""
    return list(
        Dispute.objects.filter(tenant_id=tenant_id, status=Dispute.Status.OPEN)
        .select_related("project")
        .annotate(n=Count("candidates"))
        .order_by("opened_at")[:limit]
    )


def open_dispute_count(tenant_id: int) -> int:
    return Dispute.objects.filter(tenant_id=tenant_id, status=Dispute.Status.OPEN).count()


# Open disputes oldest first (the queue); resolved ones by when they were resolved, the latest first.
_DISPUTE_ORDER = {"open": ("opened_at", "id"), "resolved": ("-resolved_at", "-id")}


def disputes(tenant_id: int, show: str, *, limit: int = 100) -> list[tuple[Dispute, list[MemoryRecord]]]:
    """The disputes in status `show` ("all": any), open ones oldest first, resolved ones latest resolved first, the
    rest newest first, each with its candidates and their issuers (three queries in all)."""
    rows = (
        Dispute.objects.filter(tenant_id=tenant_id)
        .select_related("project", "resolved_by", "winner")
        .prefetch_related("candidates__issuer")
        .order_by(*_DISPUTE_ORDER.get(show, ("-opened_at", "-id")))
    )
    if show in Dispute.Status.values:
        rows = rows.filter(status=show)
    # The candidates in the order they were written (a many-to-many has no order of its own; SQLite and
    # PostgreSQL give different ones).
    return [(d, sorted(d.candidates.all(), key=_written_order)) for d in rows[:limit]]


def open_dispute_of_fact(tenant_id: int, project: str, subject: str, predicate: str) -> Dispute | None:
    """The fact's open dispute, its candidates and their issuers prefetched."""
    return (
        Dispute.objects.filter(
            tenant_id=tenant_id,
            project__key=project,
            subject_id=subject,
            predicate=predicate,
            status=Dispute.Status.OPEN,
        )
        .prefetch_related("candidates__issuer")
        .first()
    )


# --- Rechecks and policies ------------------------------------------------------------------------------


def overdue_high_risk(tenant_id: int, now: datetime, *, limit: int = 50) -> list[tuple[MemoryRecord, FieldPolicy]]:
    """Records kept fresh whose high-risk field is past its `recheck_after`, oldest due first, each with the
    policy that governs it (policies.policies_for: the project's own, else the tenant-wide one)."""
    high = FieldPolicy.objects.filter(tenant_id=tenant_id, risk=FieldPolicy.Risk.HIGH).values("predicate")
    due = list(
        MemoryRecord.objects.for_tenant(tenant_id)
        .kept_fresh(now)
        .filter(recheck_after__lte=now, predicate__in=high)
        .select_related("project")
        .order_by("recheck_after")[:limit]
    )
    governing = policies_for(tenant_id, {(r.project.key, r.predicate) for r in due})
    rows = []
    for record in due:
        policy = governing[(record.project.key, record.predicate)]
        if policy is not None and policy.risk == FieldPolicy.Risk.HIGH and record.recheck_after is not None:
            rows.append((record, policy))
    return rows


def recheck_queue(tenant_id: int, now: datetime, *, limit: int = 300) -> list[tuple[MemoryRecord, FieldPolicy | None]]:
    """Records kept fresh that are past `recheck_after` or flagged for a person, each with its governing policy."""
    records = list(
        # Today's value and a scheduled successor alike (the sweep's rule, `RecordQuerySet.kept_fresh`).
        MemoryRecord.objects.for_tenant(tenant_id)
        .kept_fresh(now)
        .filter(Q(recheck_after__lte=now) | ~Q(attention=""))
        .select_related("project")
        .order_by("recheck_after")[:limit]
    )
    governing = policies_for(tenant_id, {(r.project.key, r.predicate) for r in records})
    return [(r, governing[(r.project.key, r.predicate)]) for r in records]


def failing_canonical_sources(tenant_id: int, *, limit: int = 50) -> list[tuple[FieldPolicy, RecheckAttempt]]:
    """Policies with a canonical source whose last automatic check (any trigger but a person's manual
    verification) did not verify, each with that attempt. Two queries for any number of policies: the last
    attempt's id is a correlated subquery per policy row (over the field's records in the policy's project, or
    in every project for a tenant-wide policy), then the attempts are read by id."""
    automatic = RecheckAttempt.objects.filter(tenant_id=tenant_id, record__predicate=OuterRef("predicate")).exclude(
        trigger=RecheckAttempt.Trigger.MANUAL
    )
    newest = automatic.order_by("-id").values("id")[:1]
    in_project = automatic.filter(record__project_id=OuterRef("project_id")).order_by("-id").values("id")[:1]
    policies = list(
        FieldPolicy.objects.filter(tenant_id=tenant_id, canonical_source__isnull=False)
        .select_related("project")
        .annotate(
            last_attempt_id=Case(
                When(project__isnull=True, then=Subquery(newest)),
                default=Subquery(in_project),
                output_field=IntegerField(),
            )
        )
        .order_by("id")[:limit]
    )
    wanted = [p.last_attempt_id for p in policies if p.last_attempt_id is not None]
    attempts = RecheckAttempt.objects.in_bulk(wanted)
    rows: list[tuple[FieldPolicy, RecheckAttempt]] = []
    for policy in policies:
        last = attempts.get(policy.last_attempt_id)
        if last is not None and not last.verified:
            rows.append((policy, last))
    return rows


def field_policies(tenant_id: int) -> QuerySet[FieldPolicy]:
    return (
        FieldPolicy.objects.filter(tenant_id=tenant_id).select_related("project").order_by("predicate", "project__key")
    )


def field_policy(tenant_id: int, policy_id: int) -> FieldPolicy | None:
    return FieldPolicy.objects.filter(tenant_id=tenant_id, pk=policy_id).select_related("project").first()


# --- Records and facts ------------------------------------------------------------------------------------


def records_by_memory_id(tenant_id: int, memory_ids: list[str]) -> list[MemoryRecord]:
    """The tenant's live records among `memory_ids`, with their projects."""
    return list(MemoryRecord.objects.for_tenant(tenant_id).filter(memory_id__in=memory_ids).select_related("project"))


@dataclass
class FactTrail:
    """What the fact page shows beside the chain: recheck attempts, audit events and the open dispute."""

    attempts: list[RecheckAttempt]
    events: list[AuditEvent]
    dispute: Dispute | None
    candidates: list[MemoryRecord]


def fact_trail(
    tenant_id: int, chain: list[MemoryRecord], project: str, subject: str, predicate: str, *, limit: int = 50
) -> FactTrail:
    """The fact's recheck attempts and audit events (newest first, `limit` of each) and its open dispute with
    the candidates: four queries whatever the length of the chain."""
    attempts = list(RecheckAttempt.objects.filter(record__in=[r.pk for r in chain]).order_by("-id")[:limit])
    events = list(
        AuditEvent.objects.filter(tenant_id=tenant_id, object_id__in=[r.memory_id for r in chain]).order_by(
            *AUDIT_ORDER
        )[:limit]
    )
    dispute = open_dispute_of_fact(tenant_id, project, subject, predicate)
    return FactTrail(attempts, events, dispute, sorted(dispute.candidates.all(), key=_written_order) if dispute else [])


@dataclass
class FactNeighbours:
    """The facts before and after one in its project, in the order of the records list sorted by fact (subject,
    then predicate): (subject, predicate) pairs, None at either end."""

    previous: tuple[str, str] | None
    following: tuple[str, str] | None


def fact_neighbours(tenant_id: int, project: str, subject: str, predicate: str) -> FactNeighbours:
    """The previous and next fact of the project (keyboard navigation on the fact page): two queries, each
    walking the one-head-per-fact unique index from this fact's key and stopping at the first row."""
    heads = MemoryRecord.objects.in_project(tenant_id, project).filter(tenant_id=tenant_id, is_head=True)
    before = Q(subject_id__lt=subject) | Q(subject_id=subject, predicate__lt=predicate)
    after = Q(subject_id__gt=subject) | Q(subject_id=subject, predicate__gt=predicate)
    previous = heads.filter(before).order_by("-subject_id", "-predicate").values_list("subject_id", "predicate")
    following = heads.filter(after).order_by("subject_id", "predicate").values_list("subject_id", "predicate")
    return FactNeighbours(previous.first(), following.first())


# --- Audit --------------------------------------------------------------------------------------------------


def recent_changes(tenant_id: int, *, limit: int = 15) -> tuple[list[AuditEvent], dict[str, tuple[str, str]]]:
    """The latest audit events that changed something (an agent's MCP tool call is audited but changes
    nothing), newest first, and the (subject, predicate) of each record they name: two queries."""
    changes = AuditEvent.objects.filter(tenant_id=tenant_id).exclude(action=audit.Action.MCP_TOOL_CALLED)
    events = list(changes.order_by(*AUDIT_ORDER)[:limit])
    record_ids = {e.object_id for e in events if e.object_type == "record"}
    # A dispute is named by the fact its candidates hold.
    for e in events:
        if e.object_type == "dispute":
            record_ids.update(str(m) for m in ((e.after or e.before or {}).get("candidates") or [])[:1])
    facts = {
        m: (s, p)
        for m, s, p in MemoryRecord.objects.filter(tenant_id=tenant_id, memory_id__in=record_ids).values_list(
            "memory_id", "subject_id", "predicate"
        )
    }
    return events, facts


def audit_events(tenant_id: int, criteria: dict[str, Any]) -> QuerySet[AuditEvent]:
    """The tenant's audit events matching the audit page's filters (actor, action, object, since, until); the
    caller pages them by AUDIT_ORDER."""
    rows = AuditEvent.objects.filter(tenant_id=tenant_id)
    if criteria.get("actor"):
        rows = rows.filter(actor_name=criteria["actor"])
    if criteria.get("action"):
        rows = rows.filter(action=criteria["action"])
    if criteria.get("object"):
        rows = rows.filter(object_id=criteria["object"])
    if criteria.get("since"):
        rows = rows.filter(at__gte=criteria["since"])
    if criteria.get("until"):
        rows = rows.filter(at__lte=criteria["until"])
    return rows


# --- The fact page's decision receipts (templates/dashboard/_receipts.html) ------------------------------

REFUSAL_WORDS = {
    "recheck_required": "Refused: it had to be verified first and could not be",
    "fact_disputed": "Refused: sources disagree",
}


@dataclass(frozen=True)
class ReceiptRow:
    """One read for acting on a fact, in people's words: who, when, what it was told."""

    receipt_id: str
    at: datetime
    reader: str
    decision: str
    revision: int | None
    freshness: str
    recheck: str


def fact_receipts(
    principal: Principal, project: str, subject: str, predicate: str, *, limit: int = 20
) -> list[ReceiptRow]:
    """The fact's decision receipts the principal may read (owners and compliance: all; others: their own), newest
    first, in one query."""
    found = (
        receipts.visible(principal)
        .filter(project_key=project, subject_id=subject, predicate=predicate)
        .select_related("reader")
        .order_by("-id")[:limit]
    )
    outcomes = dict(RecheckAttempt.Result.choices)
    rows = []
    for receipt in found:
        document = receipt.document
        served = document.get("served") or {}
        recheck = (document.get("verification") or {}).get("recheck") or {}
        state = (document.get("freshness") or {}).get("state")
        rows.append(
            ReceiptRow(
                receipt_id=receipt.public_id,
                at=receipt.created_at,
                reader=receipt.reader.name or receipt.reader.username,
                decision=(
                    f"Served revision {served.get('revision')}"
                    if receipt.outcome == "served"
                    else REFUSAL_WORDS.get(receipt.outcome, "Refused")
                ),
                revision=served.get("revision"),
                freshness=FRESHNESS_LABELS.get(state, "") if state else "",
                recheck=outcomes.get(recheck.get("outcome", ""), "") if recheck else "not rechecked by this read",
            )
        )
    return rows
