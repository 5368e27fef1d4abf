"""Deletion requests: every door (API, compliance pages, commands, tasks) calls these functions.

The product never says "completely forgotten": it reports four stages separately.
1. accepted — the request and its tombstones are stored in one transaction;
2. removed_from_reads — every read path filters the hidden items; set in that same transaction,
   since each read path checks the tombstones and hiding rules in the database at read time. What that
   transaction does is only what reads need, set-based on the scope (a few statements whatever the
   subject's size): the stores' `hide_scope` (one rule row for a subject's records and for its log lines,
   cache keys evicted) and the propagation's notices to agents;
3. purge_confirmed — every store found (the stores whose targets were not needed to hide them find them
   when the purge starts, `find_pending`), purged and verified by reading it again;
4. backups_expire_at — the latest expiry of a backup taken before the purge.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from django.core import signing
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from deletion import ledger, reasons, stores, task_refs, tombstones
from deletion.models import Backup, DeletionRequest, StoreProgress, Tombstone
from deletion.stores import PENDING_TARGETS, Scope, job_for, scope_records
from deletion.stores.records import hides_by_rule, mark_hidden
from memory_admin.accounts.models import Principal
from memory_admin.derived.propagation import NOTICES, propagate_set
from memory_admin.memory import audit, validation
from memory_admin.memory.errors import DomainError, Forbidden, InvalidInput, InvalidState, NotFound
from memory_admin.memory.models import MemoryRecord, Project, RecordHide
from memory_admin.queueing import enqueue_after_commit

ScopeKind = DeletionRequest.ScopeKind
State = DeletionRequest.State


# Who may do what with deletion requests: the doors (API, compliance pages) ask these rather than
# checking roles themselves, so the rule lives here once.
def may_act(principal: Principal) -> bool:
    """Compliance staff file, approve, cancel and retry deletion requests."""
    return principal.has_role("compliance")


def may_read(principal: Principal) -> bool:
    """Compliance staff, owners and admins follow deletion requests; nobody else sees them."""
    return principal.has_role("compliance", "owner", "admin")


def may_lift_tombstones(principal: Principal) -> bool:
    """Only an owner lets a deleted item be written again."""
    return principal.has_role("owner")


def _changing(
    request: DeletionRequest, *, actor: Principal | None, action: audit.Action, reason: str = ""
) -> AbstractContextManager[audit.Event]:
    """`audit.changing` for a deletion request: the audit log names it "deletion" and its public id."""
    return audit.changing(
        request,
        tenant=request.tenant_id,
        object_type="deletion",
        object_id=request.public_id,
        actor=actor,
        action=action,
        reason=reason,
    )


def _require_compliance(principal: Principal) -> None:
    if not may_act(principal):
        raise Forbidden("Only compliance staff file and approve deletion requests.")


# A dry run answers a signed preview id; filing may cite it, and the dashboard always does, so what is filed
# is what was previewed. Signed (not stored): a preview changes nothing, not even a table.
PREVIEW_SALT = "deletion.preview"
PREVIEW_MAX_AGE = timedelta(minutes=30)


class PreviewInvalid(DomainError):
    """The cited preview id is forged, expired, or not this principal's."""

    code = "preview_invalid"
    status = 400


class PreviewMismatch(DomainError):
    """The request names another project or scope than the preview it cites."""

    code = "preview_mismatch"
    status = 409


@dataclass
class Preview:
    stores: dict[str, dict[str, Any]]
    preview_id: str = ""
    expires_at: datetime | None = None


@dataclass(frozen=True)
class Drift:
    """What each store held at the preview against what the filed request covers.

    Records may arrive (or be deleted by another request) between preview and filing; the request covers
    the scope as it is when filed, and this says how that differs from what was checked."""

    previewed: dict[str, int]
    filed: dict[str, int]
    records_changed: bool
    stores: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.records_changed or self.previewed != self.filed

    def describe(self) -> str:
        names = self.stores or sorted(set(self.previewed) | set(self.filed))
        parts = [
            f"{name} {self.filed.get(name, 0)} (previewed {self.previewed.get(name, 0)})"
            for name in names
            if self.filed.get(name, 0) != self.previewed.get(name, 0)
        ]
        if self.records_changed and not parts:
            parts.append("the same number of records, but not the same ones")
        return "; ".join(parts)

    def as_payload(self, preview_id: str) -> dict[str, Any]:
        return {
            "preview_id": preview_id,
            "changed": self.changed,
            "records_changed": self.records_changed,
            "previewed": self.previewed,
            "filed": self.filed,
        }


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def _scope_digest(kind: str, value: Any) -> str:
    # Order and repeats of memory ids do not change what a request deletes.
    return _digest([kind, sorted(set(value)) if kind == ScopeKind.MEMORY_IDS else value])


def _records_digest(scope: Scope) -> str:
    return _digest(sorted(scope.record_ids))


def _sign_preview(
    principal: Principal, project: Project, kind: str, value: Any, scope: Scope, counts: dict[str, int]
) -> str:
    """Content-free claims: ids of the principal and project, digests of the scope and of the records it
    resolved to, and each store's count."""
    claims = {
        "v": 1,
        "t": principal.tenant_id,
        "u": principal.pk,
        "p": project.key,
        "s": _scope_digest(kind, value),
        "r": _records_digest(scope),
        "c": counts,
    }
    return signing.dumps(claims, salt=PREVIEW_SALT, compress=True)


def _read_preview(principal: Principal, preview_id: str) -> dict[str, Any]:
    try:
        claims = signing.loads(preview_id, salt=PREVIEW_SALT, max_age=PREVIEW_MAX_AGE)
    except signing.SignatureExpired:
        raise PreviewInvalid(
            "This preview has expired; preview the request again.", code_override="preview_expired"
        ) from None
    except signing.BadSignature:
        raise PreviewInvalid("This preview id is not one this server issued.") from None
    if not isinstance(claims, dict) or claims.get("v") != 1:
        raise PreviewInvalid("This preview id is not one this server issued.")
    if claims.get("t") != principal.tenant_id or claims.get("u") != principal.pk:
        raise PreviewInvalid("This preview was made by someone else; preview the request yourself.")
    return claims


def _parse_scope(scope: Any) -> tuple[str, Any]:
    if not isinstance(scope, dict) or len(scope) != 1:
        raise InvalidInput(
            {"scope": ['Give exactly one of {"subject_id": ...}, {"memory_ids": [...]}, {"predicate": ...}.']}
        )
    kind, value = next(iter(scope.items()))
    if kind not in ScopeKind.values:
        raise InvalidInput({"scope": [f"Unknown scope {kind!r}; use subject_id, memory_ids or predicate."]})
    if kind == ScopeKind.MEMORY_IDS:
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise InvalidInput({"scope": ["memory_ids must be a non-empty list of ids."]})
    elif not isinstance(value, str) or not value.strip():
        raise InvalidInput({"scope": [f"{kind} must be a non-empty string."]})
    return kind, value


def resolve_scope(tenant_id: int, project: Project, kind: str, value: Any) -> Scope:
    records = MemoryRecord.all_objects.filter(tenant_id=tenant_id, project=project)
    if kind == ScopeKind.SUBJECT:
        records = records.filter(subject_id=value)
    elif kind == ScopeKind.PREDICATE:
        records = records.filter(predicate=value)
    else:
        records = records.filter(memory_id__in=value)
    found = scope_records(records.order_by("id"))
    subjects = [value] if kind == ScopeKind.SUBJECT else []
    return Scope(
        tenant_id=tenant_id,
        project_id=project.pk,
        project_key=project.key,
        records=found,
        subjects=subjects,
        kind=kind,
        value=value,
    )


def _project(principal: Principal, project_id: str) -> Project:
    project = Project.objects.filter(tenant_id=principal.tenant_pk, key=project_id).first()
    if project is None:
        raise NotFound(f"No project {project_id!r}.")
    return project


def _checked(principal: Principal, project_id: str, scope: Any, reason: str) -> tuple[str, Any, Project, Scope]:
    kind, value = _parse_scope(scope)
    if not (reason or "").strip():
        raise InvalidInput({"reason": ["Say why; a regulator may ask."]})
    # Ids follow the shared character set (memory.validation); one outside it is still accepted when it
    # names stored data, so memory written before the rule existed can always be deleted.
    if not Project.objects.filter(tenant_id=principal.tenant_pk, key=project_id).exists():
        validation.check_identifiers(project_id=project_id)
    project = _project(principal, project_id)
    resolved = resolve_scope(principal.tenant_pk, project, kind, value)
    if kind != ScopeKind.MEMORY_IDS and not resolved.records:
        validation.check_identifiers(**{kind: value})
    if kind == ScopeKind.MEMORY_IDS and len(resolved.records) != len(set(value)):
        missing = sorted(set(value) - set(resolved.memory_ids))
        raise InvalidInput({"scope": [f"Unknown memory ids in {project_id}: {', '.join(missing)}."]})
    return kind, value, project, resolved


def _counts(scope: Scope) -> dict[str, dict[str, Any]]:
    counted = {}
    for name, store in stores.registered().items():
        found = store.find(scope)
        counted[name] = {"found": found.count, "samples": found.samples}
    return counted


def request_deletion(
    principal: Principal,
    *,
    project_id: str,
    scope: Any,
    reason: str,
    due_by: date | None = None,
    dry_run: bool = False,
) -> DeletionRequest | Preview:
    """File a deletion request, or with `dry_run` say what each store would touch and change nothing.

    The dry run answers a `preview_id` that `file_previewed` takes, to file exactly the previewed scope.
    A scope covering a whole predicate waits for a second compliance person to approve it.
    """
    _require_compliance(principal)
    kind, value, project, resolved = _checked(principal, project_id, scope, reason)
    if dry_run:
        stores = _counts(resolved)
        counts = {name: store["found"] for name, store in stores.items()}
        return Preview(
            stores=stores,
            preview_id=_sign_preview(principal, project, kind, value, resolved, counts),
            expires_at=timezone.now() + PREVIEW_MAX_AGE,
        )
    return _file(principal, project, kind, value, reason, due_by, resolved)


def propose_deletion(principal: Principal, *, project_id: str, scope: Any, reason: str) -> DeletionRequest:
    """An agent (or anyone of the tenant) asks for a subject or some memory ids to be deleted. The request
    is filed awaiting a compliance person's approval, whoever proposes it: an agent never deletes on its own
    (the MCP tool `request_forget`). A whole predicate is not proposed this way: it needs two compliance
    people, and a proposal would let one approval stand for both."""
    kind, _ = _parse_scope(scope)
    if kind == ScopeKind.PREDICATE:
        raise InvalidInput({"scope": ["A whole predicate is filed by compliance staff; name a subject or memory ids."]})
    kind, value, project, resolved = _checked(principal, project_id, scope, reason)
    return _file(principal, project, kind, value, reason, None, resolved, awaiting_approval=True)


def file_previewed(
    principal: Principal, *, preview_id: str, project_id: str, scope: Any, reason: str, due_by: date | None = None
) -> tuple[DeletionRequest, Drift]:
    """File a request bound to the dry run that answered `preview_id`.

    1. The preview id must be this server's, unexpired, and this principal's (400 otherwise);
    2. the project and scope must be the previewed ones (409 `preview_mismatch` otherwise; nothing filed);
    3. the request is filed for the scope as it is now; the drift says how the stores' counts (and the
       records) differ from the preview, since records may have arrived in between.
    """
    _require_compliance(principal)
    claims = _read_preview(principal, preview_id)
    kind, value = _parse_scope(scope)
    if claims.get("p") != project_id or claims.get("s") != _scope_digest(kind, value):
        raise PreviewMismatch(
            "This request's project or scope differs from the preview it cites; preview what you mean to file."
        )
    kind, value, project, resolved = _checked(principal, project_id, scope, reason)
    request = _file(principal, project, kind, value, reason, due_by, resolved)
    if request.state == State.ACCEPTED:
        # The scope is removed from reads by now; the stores whose targets wait for the purge find them
        # here, so the drift compares every store's count with the preview.
        find_pending(request.pk)
        filed = dict(request.stores.values_list("store", "found"))
    else:  # awaiting approval: the stores are found again when it is approved
        filed = {name: store["found"] for name, store in _counts(resolved).items()}
    previewed = {str(k): int(v) for k, v in dict(claims.get("c") or {}).items()}
    drift = Drift(
        previewed=previewed,
        filed=filed,
        records_changed=claims.get("r") != _records_digest(resolved),
        stores=list(stores.registered()),
    )
    return request, drift


def _file(
    principal: Principal,
    project: Project,
    kind: str,
    value: Any,
    reason: str,
    due_by: date | None,
    resolved: Scope,
    *,
    awaiting_approval: bool = False,
) -> DeletionRequest:
    validation.check_datetimes(due_by=due_by)
    # The values being erased never stay in the reason, nor in its audit event (deletion.reasons).
    kept_reason, reason_redacted = reasons.redact(reason.strip(), resolved)
    with transaction.atomic():
        request = DeletionRequest.objects.create(
            tenant_id=principal.tenant_pk,
            project=project,
            scope_kind=kind,
            scope_value=value,
            reason=kept_reason,
            reason_redacted=reason_redacted,
            due_by=due_by,
            requested_by=principal,
            state=State.AWAITING_APPROVAL if awaiting_approval or kind == ScopeKind.PREDICATE else State.ACCEPTED,
        )
        if request.state == State.ACCEPTED:
            _accept(request, resolved)
        # Last: the audit write locks the tenant's audit chain until the commit (memory.audit_chain), so it comes
        # after the acceptance's row locks, never before them.
        audit.record_event(
            tenant=request.tenant_id,
            actor=principal,
            action=audit.Action.DELETION_REQUESTED,
            object_type="deletion",
            object_id=request.public_id,
            reason=request.reason,
            after={"scope": kind, "state": request.state},
        )
    return request


def approve(principal: Principal, public_id: str) -> DeletionRequest:
    """A second compliance person approves a request that covers a whole predicate."""
    _require_compliance(principal)
    with transaction.atomic():
        request = get_request(principal, public_id, for_update=True)
        if request.state != State.AWAITING_APPROVAL:
            raise InvalidState(f"This request is {request.state}; only one awaiting approval can be approved.")
        if request.requested_by_id == principal.pk:
            raise Forbidden("A second compliance person must approve; the requester cannot.")
        with _changing(request, actor=principal, action=audit.Action.DELETION_APPROVED):
            request.approved_by = principal
            request.state = State.ACCEPTED
            request.accepted_at = timezone.now()
            request.save(update_fields=["approved_by", "state", "accepted_at"])
            # Inside the block: its audit event (which locks the tenant's audit chain) is written after the
            # acceptance's row locks (memory.audit_chain).
            _accept(request, resolve_scope(request.tenant_id, request.project, request.scope_kind, request.scope_value))
    return request


def cancel(principal: Principal, public_id: str, reason: str) -> DeletionRequest:
    """Cancel a request before purging starts (while it awaits approval; nothing is hidden yet)."""
    _require_compliance(principal)
    with transaction.atomic():
        request = get_request(principal, public_id, for_update=True)
        if request.state != State.AWAITING_APPROVAL:
            raise InvalidState("Purging has started; a deletion cannot be cancelled any more.")
        with _changing(request, actor=principal, action=audit.Action.DELETION_CANCELLED, reason=reason):
            request.state = State.CANCELLED
            request.cancelled_at = timezone.now()
            request.save(update_fields=["state", "cancelled_at"])
    return request


def _accept(request: DeletionRequest, scope: Scope) -> None:
    """Stages 1 and 2 in the caller's transaction: tombstones, per-store rows, the notices to agents holding
    copies, and every store's hiding, each set-based on the scope; the purge tasks are enqueued after
    commit. Stores that need no targets to hide find them when the purge starts (`find_pending`)."""
    now = timezone.now()
    scope = replace(scope, request_public_id=request.public_id)
    if request.scope_kind == ScopeKind.SUBJECT:
        scope_hash = tombstones.subject_scope(request.tenant_id, scope.project_key, request.scope_value)
    elif request.scope_kind == ScopeKind.PREDICATE:
        scope_hash = tombstones.predicate_scope(request.tenant_id, scope.project_key, request.scope_value)
    else:
        scope_hash = ""
    # One INSERT for the scope's tombstone and the records' (the keyed hashes are computed here: the key never
    # reaches the database), with no model instances. Records hidden by a rule get theirs when their purge starts
    # (`mark_hidden`); until then the refusals read the hidden rows as those tombstones.
    records = [] if hides_by_rule(scope) else scope.records
    entries = tombstones.insert_for_request(request, scope.project_key, records, now, scope_hash=scope_hash)
    ledger.append_entries_after_commit(entries)
    # Dependants learn first, while the records still read as themselves: a notice to every agent holding a
    # copy. The rest of the propagation is the stores' hiding below: summaries withdrawn and scheduled
    # actions cancelled (no stale mark or suspension first), cache keys evicted; vector entries reach reads
    # only through their records (search keeps the live ones), so the embeddings store removes them later.
    propagate_set(
        scope.records_query().live(),
        tenant_id=request.tenant_id,
        reason=f"Deleted by request {request.public_id}.",
        now=now,
        kinds=NOTICES,
    )
    rows = []
    for name, store in stores.registered().items():
        progress = StoreProgress(
            request=request, store=name, targets=PENDING_TARGETS, evidence={"find": PENDING_TARGETS["pending"]}
        )
        if store.hides_by_targets:
            found = store.find(scope)
            progress.targets, progress.found = found.targets, found.count
            progress.evidence = {"samples": found.samples}
            progress.hidden = store.hide(job_for(progress), now)
        progress.hidden += store.hide_scope(scope, now)
        rows.append(progress)
    StoreProgress.objects.bulk_create(rows)
    # Stamped as the acceptance transaction ends: reads stop returning the scope at its commit, next.
    request.removed_from_reads_at = timezone.now()
    request.save(update_fields=["removed_from_reads_at"])
    enqueue_after_commit(task_refs.run_request(), request.pk)


def find_pending(request_id: int) -> int:
    """The purge's first step: every store of the request whose `find` waited finds its targets, all of
    them before any store purges (the first purge task to start does it, under the request's lock; the
    others then find nothing pending). The scope is the records the request tombstoned, hidden but still
    there. Answers how many stores were found."""
    with transaction.atomic():
        request = DeletionRequest.objects.select_for_update(of=("self",)).select_related("project").get(pk=request_id)
        pending = [p for p in request.stores.all() if p.targets == PENDING_TARGETS]
        if not pending:
            return 0
        scope = tombstoned_scope(request)
        for progress in pending:
            found = stores.get(progress.store).find(scope)
            StoreProgress.objects.filter(pk=progress.pk).update(
                targets=found.targets, found=found.count, evidence={"samples": found.samples}
            )
    return len(pending)


def tombstoned_scope(request: DeletionRequest) -> Scope:
    """The scope a request resolved at acceptance: the records it left a tombstone for, or hid by a rule whose
    tombstones wait for the purge."""
    stones = Tombstone.objects.filter(request=request, kind=Tombstone.Kind.RECORD).values("memory_id")
    records = MemoryRecord.all_objects.filter(
        tenant_id=request.tenant_id, project_id=request.project_id, memory_id__in=stones
    )
    for rule in RecordHide.objects.filter(tenant_id=request.tenant_id, hidden_by=request.public_id):
        records = records | rule.covered()
    records = records.order_by("id")
    return Scope(
        tenant_id=request.tenant_id,
        project_id=request.project_id,
        project_key=request.project.key,
        records=scope_records(records),
        subjects=[request.scope_value] if request.scope_kind == ScopeKind.SUBJECT else [],
        kind=request.scope_kind,
        value=request.scope_value,
        request_public_id=request.public_id,
    )


def visible_requests(principal: Principal) -> QuerySet[DeletionRequest]:
    """The tenant's deletion requests the principal may follow (none for other roles), newest first."""
    if not may_read(principal):
        return DeletionRequest.objects.none()
    return (
        DeletionRequest.objects.filter(tenant_id=principal.tenant_pk)
        .select_related("project", "requested_by", "approved_by")
        .order_by("-id")
    )


def get_request(principal: Principal, public_id: str, *, for_update: bool = False) -> DeletionRequest:
    if not may_read(principal):
        raise NotFound(f"No deletion request {public_id!r}.")
    qs = DeletionRequest.objects.filter(tenant_id=principal.tenant_pk, public_id=public_id)
    if for_update:
        qs = qs.select_for_update(of=("self",))
    request = qs.select_related("project", "requested_by", "approved_by").first()
    if request is None:
        raise NotFound(f"No deletion request {public_id!r}.")
    return request


def can_retry(request: DeletionRequest) -> bool:
    """Whether the request has stores left to retry: accepted (approved) and not yet purge-confirmed."""
    return request.state not in (State.AWAITING_APPROVAL, State.CANCELLED) and request.purge_confirmed_at is None


def retry_stores(principal: Principal, public_id: str) -> tuple[DeletionRequest, int]:
    """Requeue every store of the request that is not verified (failed ones restart their attempts).

    Compliance staff only (403); a request awaiting approval, cancelled, or whose purge is confirmed has
    nothing to retry (409 `invalid_state`). Answers the request and how many stores were requeued.
    """
    if not may_act(principal):
        raise Forbidden("Only compliance staff retry deletions.")
    with transaction.atomic():
        # Locked like finish_if_verified does, so a retry and the purge's confirmation do not cross.
        request = get_request(principal, public_id, for_update=True)
        if request.purge_confirmed_at is not None:
            raise InvalidState("The purge is confirmed: every store is verified, so there is nothing to retry.")
        if not can_retry(request):
            raise InvalidState(f"A {request.state} request has nothing to retry.")
        rows = list(request.stores.exclude(state=StoreProgress.State.VERIFIED))
        StoreProgress.objects.filter(pk__in=[r.pk for r in rows], state=StoreProgress.State.FAILED).update(
            state=StoreProgress.State.PENDING, lease_until=None
        )
        for row in rows:
            enqueue_after_commit(task_refs.purge_store(), row.pk)
    return request, len(rows)


def finish_if_verified(request_id: int) -> bool:
    """Stage 3 and 4: set once every store is verified, never earlier (compare-and-set on the state)."""
    with transaction.atomic():
        request = DeletionRequest.objects.select_for_update().get(pk=request_id)
        if request.purge_confirmed_at is not None:
            return True
        if request.stores.exclude(state=StoreProgress.State.VERIFIED).exists():
            return False
        now = timezone.now()
        held = list(Backup.objects.filter(taken_at__lte=now, expires_at__gt=now))
        with _changing(request, actor=None, action=audit.Action.DELETION_PURGE_CONFIRMED):
            request.purge_confirmed_at = now
            request.state = State.PURGE_CONFIRMED
            request.backups_expire_at = max((b.expires_at for b in held), default=None)
            request.backups_note = (
                f"{len(held)} backup(s) taken before the purge still hold the data until the latest expires."
                if held
                else "No backup taken before the purge is still kept."
            )
            request.save(update_fields=["purge_confirmed_at", "state", "backups_expire_at", "backups_note"])
    return True


def lift_tombstone(principal: Principal, tombstone_id: int, reason: str) -> Tombstone:
    """An owner lets a deleted item be written again; only with a reason, and audited."""
    if not may_lift_tombstones(principal):
        raise Forbidden("Only an owner can lift a tombstone.")
    if not (reason or "").strip():
        raise InvalidInput({"reason": ["Say why the deleted content may come back."]})
    with transaction.atomic():
        stone = Tombstone.objects.select_for_update().filter(tenant_id=principal.tenant_pk, pk=tombstone_id).first()
        if stone is None:
            raise NotFound("No such tombstone.")
        if stone.lifted_at is None:
            # Before the purge, the request's records may be hidden by its rule, their rows unmarked: a write let
            # through would find them as the fact's current rows, so they are marked first.
            mark_hidden(stone.tenant_id, stone.request_public_id)
            with audit.changing(
                stone,
                tenant=stone.tenant_id,
                object_type="tombstone",
                object_id=str(stone.pk),
                actor=principal,
                action=audit.Action.TOMBSTONE_LIFTED,
                reason=reason,
            ):
                stone.lifted_at, stone.lifted_by, stone.lift_reason = timezone.now(), principal, reason.strip()
                stone.save(update_fields=["lifted_at", "lifted_by", "lift_reason"])
    return stone


def report(request: DeletionRequest) -> dict[str, Any]:
    """What has and has not happened, stage by stage and store by store, with the evidence."""

    def iso(moment: datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "id": request.public_id,
        "project_id": request.project.key,
        "scope": {request.scope_kind: request.scope_value},
        "reason": request.reason,
        "reason_redacted": request.reason_redacted,
        "due_by": request.due_by.isoformat() if request.due_by else None,
        "state": request.state,
        "requested_by": request.requested_by.name,
        "approved_by": request.approved_by.name if request.approved_by else None,
        "stages": {
            "accepted_at": iso(request.accepted_at) if request.state != State.AWAITING_APPROVAL else None,
            "removed_from_reads_at": iso(request.removed_from_reads_at),
            "purge_confirmed_at": iso(request.purge_confirmed_at),
            "backups_expire_at": iso(request.backups_expire_at),
        },
        "backups_note": request.backups_note,
        "stores": [
            {
                "store": p.store,
                "state": p.state,
                "found": p.found,
                "hidden": p.hidden,
                "purged": p.purged,
                "remaining": p.remaining,
                "attempts": p.attempts,
                "last_error": p.last_error,
                "verified_at": iso(p.verified_at),
                "evidence": p.evidence,
            }
            # all(): a list page that prefetched the stores reads no more rows (one query per request otherwise).
            for p in sorted(request.stores.all(), key=lambda p: p.pk)
        ],
        "statement": "Each stage is reported separately; backups taken before the purge hold the data until "
        "they expire. This report does not claim the data is completely forgotten.",
    }
