"""Writing derived items with their lineage: events, summaries, scheduled actions, loaded contexts.

A derived item names the records it was built from (`derived_from: [{memory_id, revision}]`); each base
is checked in the same transaction, so nothing is built on a value that has stopped being believed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.derived import hooks as derived_hooks
from memory_admin.derived import task_refs
from memory_admin.derived.models import (
    ActionBase,
    ContextItem,
    ContextLoad,
    Event,
    Invalidation,
    ScheduledAction,
    Summary,
    SummaryBase,
)
from memory_admin.derived.propagation import propagate
from memory_admin.memory import hooks, validation
from memory_admin.memory.actions import project_for
from memory_admin.memory.errors import BaseNotCurrent, Forbidden, InvalidInput, InvalidState, NotFound, Tombstoned
from memory_admin.memory.models import MemoryRecord
from memory_admin.queueing import enqueue_after_commit

Status = MemoryRecord.Status


@dataclass(frozen=True)
class BaseRef:
    memory_id: str
    revision: int


def _require_writer(principal: Principal) -> None:
    if not principal.can_write:
        raise Forbidden("This principal may not write derived items.")


def _aware(name: str, moment: datetime | None) -> None:
    """With an offset and in range (memory.validation): a row out of range could not be read back."""
    validation.check_datetimes(**{name: moment})


def resolve_bases(
    principal: Principal, project_id: str, bases: list[BaseRef], *, lock: bool, require_current: bool
) -> list[MemoryRecord]:
    """The records `bases` name, in the principal's tenant and project.

    Unknown ids or a revision that is not the record's → 400. With `require_current`, a base that is not
    the current belief → 409 base_not_current. With `lock`, the rows stay locked to the end of the
    transaction, so no change can slip in between the check and the write that depends on it.
    """
    if not bases:
        raise InvalidInput({"derived_from": ["Name at least one base: [{memory_id, revision}]."]})
    hooks.guard_derived_from(principal.tenant_pk, [b.memory_id for b in bases], "This item")
    qs = MemoryRecord.objects.filter(
        tenant_id=principal.tenant_id, project__key=project_id, memory_id__in=[b.memory_id for b in bases]
    )
    if lock:  # the records' rows only, not the project's the filter joins (see memory curation.get_record)
        qs = qs.select_for_update(of=("self",))
    found = {r.memory_id: r for r in qs}
    problems = []
    for base in bases:
        record = found.get(base.memory_id)
        if record is None:
            problems.append(f"{base.memory_id}: no such record in {project_id}.")
        elif record.revision != base.revision:
            problems.append(f"{base.memory_id}: is revision {record.revision}, not {base.revision}.")
    if problems:
        raise InvalidInput({"derived_from": problems})
    now = timezone.now()
    stale = [b.memory_id for b in bases if not found[b.memory_id].is_current_at(now)]
    if require_current and stale:
        raise BaseNotCurrent(
            f"Not the current belief any more: {', '.join(stale)}. Rebuild from the current values.",
            stale=stale,
        )
    return [found[b.memory_id] for b in bases]


def log_event(
    principal: Principal,
    *,
    project_id: str,
    session_id: str,
    actor: str,
    text: str,
    occurred_at: datetime,
    subject_ids: list[str],
) -> Event:
    """Append a raw conversation event to the log store."""
    _require_writer(principal)
    _aware("occurred_at", occurred_at)
    validation.check_identifiers(project_id=project_id, subject_ids=list(subject_ids))
    with hooks.write_scope("event", principal.name), transaction.atomic():
        derived_hooks.guard_event(principal.tenant_pk, project_id, subject_ids, occurred_at)
        project = project_for(principal.require_tenant, project_id)
        return Event.objects.create(
            tenant_id=principal.tenant_pk,
            project=project,
            session_id=session_id,
            actor=actor,
            text=text,
            occurred_at=occurred_at,
            subject_ids=subject_ids,
        )


def check_assertion_events(write: hooks.FactWrite) -> None:
    """Memory's assertion check: every event id a fact cites is a logged event of its project (400 otherwise)."""
    if not write.event_ids:
        return
    known = set(
        Event.objects.filter(
            tenant_id=write.tenant_id, project__key=write.project_id, public_id__in=write.event_ids
        ).values_list("public_id", flat=True)
    )
    if unknown := sorted(set(write.event_ids) - known):
        raise InvalidInput({"source": [f"Unknown event ids in {write.project_id}: {', '.join(unknown)}."]})


def create_summary(
    principal: Principal,
    *,
    project_id: str,
    text: str,
    bases: list[BaseRef],
    kind: str = "text",
    replaces: Summary | None = None,
) -> Summary:
    """A summary built on current bases (409 base_not_current otherwise), embedded after commit."""
    _require_writer(principal)
    with hooks.write_scope("summary", principal.name), transaction.atomic():
        records = resolve_bases(principal, project_id, bases, lock=True, require_current=True)
        summary = Summary.objects.create(
            tenant_id=principal.tenant_pk,
            project=records[0].project,
            kind=kind,
            text=text,
            created_by=principal,
            derived_from=[{"memory_id": b.memory_id, "revision": b.revision} for b in bases],
            replaces=replaces,
        )
        SummaryBase.objects.bulk_create([SummaryBase(summary=summary, record=r, revision=r.revision) for r in records])
        enqueue_after_commit(task_refs.embed_summaries(), [summary.pk])
    return summary


def get_summary(principal: Principal, public_id: str) -> Summary:
    summary = (
        Summary.objects.filter(tenant_id=principal.tenant_pk, public_id=public_id)
        .select_related("project", "created_by")
        .first()
    )
    if summary is None:
        raise NotFound(f"No summary {public_id!r}.")
    if summary.hidden_at is not None:
        raise Tombstoned("This summary was built on deleted memory; it is withdrawn and being purged.")
    return summary


# Regenerators rebuild a summary of a kind from its current bases only, never from the stale text.
Regenerator = Callable[[list[MemoryRecord]], str]
REGENERATORS: dict[str, Regenerator] = {}


def regenerator(kind: str) -> Callable[[Regenerator], Regenerator]:
    def register(fn: Regenerator) -> Regenerator:
        REGENERATORS[kind] = fn
        return fn

    return register


@regenerator("facts_digest")
def facts_digest(bases: list[MemoryRecord]) -> str:
    """One line per fact: "subject · predicate: value"."""
    return "\n".join(f"{r.subject_id} · {r.predicate}: {r.value}" for r in bases)


def regenerate_summary(summary: Summary) -> Summary | None:
    """Rebuild a stale summary from the current record of each base fact, if its kind has a regenerator.

    The stale summary is withdrawn and the new one `replaces` it. Returns None when the kind has no
    regenerator, or when a base fact has no current value any more (the summary stays stale).
    """
    build = REGENERATORS.get(summary.kind)
    if build is None or summary.status != Summary.Status.STALE:
        return None
    now = timezone.now()
    heads = []
    for base in summary.bases.select_related("record", "record__project"):
        # The fact's current record, not its head: a successor scheduled ahead is the head before it is in effect.
        head = (
            MemoryRecord.objects.current(now)
            .filter(
                tenant_id=base.record.tenant_id,
                project_id=base.record.project_id,
                subject_id=base.record.subject_id,
                predicate=base.record.predicate,
            )
            .first()
        )
        if head is None or not head.is_current_at(now):
            return None
        heads.append(head)
    with transaction.atomic():
        locked = Summary.objects.select_for_update().get(pk=summary.pk)
        if locked.status != Summary.Status.STALE:
            return None
        fresh = create_summary(
            summary.created_by,
            project_id=summary.project.key,
            text=build(heads),
            kind=summary.kind,
            bases=[BaseRef(h.memory_id, h.revision) for h in heads],
            replaces=locked,
        )
        Summary.objects.filter(pk=locked.pk).update(
            status=Summary.Status.WITHDRAWN, status_reason=f"Regenerated as {fresh.public_id}.", status_changed_at=now
        )
    return fresh


def regenerate_from(summary: Summary, remaining: list[dict[str, Any]]) -> str | None:
    """The text a summary's regenerator builds from `remaining` bases, if it has one and every remaining
    base is still the current belief; None otherwise (the summary is then only deleted)."""
    build = REGENERATORS.get(summary.kind)
    if build is None or not remaining:
        return None
    now = timezone.now()
    records = list(
        MemoryRecord.objects.filter(tenant_id=summary.tenant_id, memory_id__in=[b["memory_id"] for b in remaining])
    )
    if len(records) != len(remaining) or not all(r.is_current_at(now) for r in records):
        return None
    return build(records)


def schedule_action(
    principal: Principal,
    *,
    project_id: str,
    kind: str,
    payload: dict[str, Any],
    due_at: datetime,
    bases: list[BaseRef],
) -> ScheduledAction:
    """An action the agent planned from current facts (409 base_not_current otherwise)."""
    _require_writer(principal)
    _aware("due_at", due_at)
    with hooks.write_scope("scheduled_action", principal.name), transaction.atomic():
        records = resolve_bases(principal, project_id, bases, lock=True, require_current=True)
        action = ScheduledAction.objects.create(
            tenant_id=principal.tenant_pk,
            project=records[0].project,
            agent=principal,
            kind=kind,
            payload=payload,
            due_at=due_at,
            derived_from=[{"memory_id": b.memory_id, "revision": b.revision} for b in bases],
        )
        ActionBase.objects.bulk_create([ActionBase(action=action, record=r, revision=r.revision) for r in records])
    return action


def get_action(principal: Principal, public_id: str, *, for_update: bool = False) -> ScheduledAction:
    qs = ScheduledAction.objects.filter(tenant_id=principal.tenant_pk, public_id=public_id)
    if for_update:  # the action's row only, not its project's or agent's (see memory curation.get_record)
        qs = qs.select_for_update(of=("self",))
    action = qs.select_related("project", "agent").first()
    if action is None:
        raise NotFound(f"No scheduled action {public_id!r}.")
    return action


def confirm_action(
    principal: Principal,
    public_id: str,
    *,
    bases: list[BaseRef],
    due_at: datetime | None = None,
    payload: dict[str, Any] | None = None,
) -> ScheduledAction:
    """Re-confirm a suspended action against the current values: its bases are replaced."""
    _require_writer(principal)
    _aware("due_at", due_at)
    with transaction.atomic():
        action = get_action(principal, public_id, for_update=True)
        if action.status not in (ScheduledAction.Status.SUSPENDED, ScheduledAction.Status.SCHEDULED):
            # The action's state, not the body, is what is wrong: a conflict (409), as for any state change.
            raise InvalidState(f"A {action.status} action cannot be confirmed.")
        records = resolve_bases(principal, action.project.key, bases, lock=True, require_current=True)
        action.bases.all().delete()
        ActionBase.objects.bulk_create([ActionBase(action=action, record=r, revision=r.revision) for r in records])
        action.derived_from = [{"memory_id": b.memory_id, "revision": b.revision} for b in bases]
        action.status = ScheduledAction.Status.SCHEDULED
        action.status_reason = "Re-confirmed against the current values."
        action.status_changed_at = timezone.now()
        if due_at is not None:
            action.due_at = due_at
        if payload is not None:
            action.payload = payload
        action.save()
    return action


def register_context_load(
    principal: Principal,
    *,
    session_id: str,
    bases: list[BaseRef],
    expires_at: datetime,
    project_id: str | None = None,
) -> ContextLoad:
    """Record what an agent loaded into a session. It is a report of what happened, so stale copies are
    accepted, and each one gets its invalidation notice at once. A candidate of an open dispute is not stale: it
    was never the current belief, the reader was shown it as disputed (a read that registers its own load must
    not notify its reader of what it was just shown), and the dispute's resolution notifies its holders."""
    _require_writer(principal)
    _aware("expires_at", expires_at)
    # A memory named twice was loaded once; of two revisions named, the older one is what the session may still
    # hold, so it is the one whose staleness gets a notice.
    oldest: dict[str, BaseRef] = {}
    for base in bases:
        if base.memory_id not in oldest or base.revision < oldest[base.memory_id].revision:
            oldest[base.memory_id] = base
    bases = list(oldest.values())
    with hooks.write_scope("context_load", principal.name), transaction.atomic():
        hooks.guard_derived_from(principal.tenant_pk, [b.memory_id for b in bases], "This context")
        qs = MemoryRecord.objects.filter(tenant_id=principal.tenant_id, memory_id__in=[b.memory_id for b in bases])
        if project_id:
            qs = qs.filter(project__key=project_id)
        found = {r.memory_id: r for r in qs}
        missing = [b.memory_id for b in bases if b.memory_id not in found]
        if missing or not bases:
            raise InvalidInput({"memories": [f"Unknown memory ids: {', '.join(missing)}." if missing else "Empty."]})
        load = ContextLoad.objects.create(
            tenant_id=principal.tenant_pk, agent=principal, session_id=session_id, expires_at=expires_at
        )
        ContextItem.objects.bulk_create(
            [ContextItem(load=load, record=found[b.memory_id], revision=b.revision) for b in bases]
        )
        now = timezone.now()
        stale = [
            record
            for record in (found[b.memory_id] for b in bases)
            if not record.is_current_at(now) and record.status != MemoryRecord.Status.DISPUTED
        ]
        if stale:
            propagate(stale, reason="Loaded after it stopped being the current belief.", now=now)
    return load


def invalidations_for(principal: Principal, agent_name: str, *, open_only: bool = True) -> Any:
    """An agent's notices. An agent reads its own; owners, admins and compliance read any agent's."""
    if principal.name != agent_name and not principal.has_role("owner", "admin", "compliance"):
        raise NotFound(f"No agent {agent_name!r}.")
    agent = Principal.objects.filter(tenant_id=principal.tenant_pk, name=agent_name).first()
    if agent is None:
        raise NotFound(f"No agent {agent_name!r}.")
    qs = Invalidation.objects.filter(tenant_id=principal.tenant_pk, agent=agent).select_related(
        "record", "successor", "load"
    )
    return qs.filter(acknowledged_at__isnull=True) if open_only else qs


def acknowledge(principal: Principal, agent_name: str, public_id: str) -> Invalidation:
    """The agent applied the notice. Only the agent itself acknowledges: a delivered notice is not an
    applied one."""
    if principal.name != agent_name:
        if principal.has_role("owner", "admin"):
            raise Forbidden("Only the agent that holds the context can acknowledge its notice.")
        raise NotFound(f"No agent {agent_name!r}.")
    notice = (
        Invalidation.objects.filter(tenant_id=principal.tenant_pk, agent=principal, public_id=public_id)
        .select_related("record", "successor", "load")
        .first()
    )
    if notice is None:
        raise NotFound(f"No notice {public_id!r}.")
    Invalidation.objects.filter(pk=notice.pk, acknowledged_at__isnull=True).update(acknowledged_at=timezone.now())
    notice.refresh_from_db()
    return notice
