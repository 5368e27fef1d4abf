"""The MCP tools' bodies: parse the arguments, call the same domain functions the API calls, and answer with
the API's shapes plus a short text a model reads correctly. Synchronous Django code; the server
(memory_admin/mcp/server.py) runs it on the caller's thread, for one authenticated principal.

Arguments are checked by the API's own serializers (the same identifiers, datetimes and limits), values by
the API parser's storability check; refusals come back as the API's error payload (`code`, `detail`, ...)
with a sentence saying what to do next, never as a crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from pydantic import ValidationError
from rest_framework import exceptions, serializers

from deletion import service as deletion_service
from memory_admin.accounts.models import Principal
from memory_admin.derived import caches, lineage, search
from memory_admin.derived.lineage import BaseRef
from memory_admin.lib.errors import DomainError
from memory_admin.lib.parsers import check_storable
from memory_admin.lib.throttling import READS, SEARCH, WRITES
from memory_admin.memory import actions, reads, receipts, validation
from memory_admin.memory.actions import Outcome
from memory_admin.memory.errors import NotFound
from memory_admin.memory.models import Dispute, MemoryRecord
from memory_admin.memory.shapes import record_payload
from memory_admin.shapes import fields, records
from memory_admin.shapes.derived import embedder_payload, hit_payload, invalidation_payload
from memory_admin.shapes.items import assertion_of

# What `recall(..., session_id=...)` registers as loaded stays held (and notified) for this long.
CONTEXT_HOLD = timedelta(hours=24)
# The most items a list tool returns in one answer (disputes, notices).
LIST_LIMIT = 100


@dataclass
class Answer:
    """A tool's result: the structured payload (JSON content), a short summary, and whether it is a refusal."""

    payload: dict[str, Any]
    summary: str
    error: bool = False
    memory_id: str | None = None  # the record the call was about, for the audit event


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 300 else text[:297] + "..."


def _parse(serializer_class: type[serializers.Serializer[Any]], data: dict[str, Any]) -> dict[str, Any]:
    check_storable(data)
    body = serializer_class(data={k: v for k, v in data.items() if v is not None})
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


def _key(project_id: str, subject_id: str, predicate: str) -> str:
    return f"{subject_id}.{predicate} in {project_id}"


# --- remember ---------------------------------------------------------------------------------------------


def remember(
    principal: Principal,
    *,
    project_id: str,
    subject_id: str,
    predicate: str,
    value: Any,
    source_ref: str | None = None,
    source_revision: str | None = None,
    source: dict[str, Any] | None = None,
    valid_from: str | None = None,
    valid_to: str | None = None,
    expected_revision: int | None = None,
    derived_from: list[dict[str, Any]] | None = None,
    event_ids: list[str] | None = None,
) -> Answer:
    """`POST /records/`: the record shape parsed by the same serializer (the source nested or flat, one form) and
    turned into the same assertion (shapes.items.assertion_of: valid_from defaults to the time of the call)."""
    if event_ids is not None:
        if source is not None:
            source = {**source, "event_ids": [*source.get("event_ids", []), *event_ids]}
        elif source_ref is not None or source_revision is not None:
            source = {"canonical_ref": source_ref, "revision": source_revision, "event_ids": event_ids}
            source_ref = source_revision = None
    data = _parse(
        records.AssertFactSerializer,
        {
            "project_id": project_id,
            "subject_id": subject_id,
            "predicate": predicate,
            "value": value,
            "valid_from": valid_from,
            "valid_to": valid_to,
            "source": source,
            "source_ref": source_ref,
            "source_revision": source_revision,
            "expected_revision": expected_revision,
            "derived_from": derived_from,
        },
    )
    result = actions.assert_fact(principal, assertion_of(data))
    record = MemoryRecord.objects.with_public_relations().get(pk=result.record.pk)
    payload: dict[str, Any] = dict(records.AssertResultSerializer((record, result)).data)
    where = _key(data["project_id"], data["subject_id"], data["predicate"])  # as stored: NFKC-normalised
    next_step = {
        Outcome.CREATED: f"Stored as the current value (revision {record.revision}). To change it later, pass "
        f"expected_revision={record.revision}.",
        Outcome.HISTORY: "Kept as history, not current: an equal or newer source revision is already recorded.",
        Outcome.UNCHANGED: f"Already recorded exactly so (revision {record.revision}); nothing changed.",
        Outcome.DISPUTED: "Stored as disputed: another source of equal rank disagrees and no rule orders them. "
        f"Neither value is current until an owner resolves dispute {payload.get('dispute_id')}; do not pick one.",
    }[result.outcome]
    payload["next_step"] = next_step
    return Answer(payload, f"remember {where}: {result.outcome.value}. {next_step}", memory_id=record.memory_id)


# --- recall / recall_as_of --------------------------------------------------------------------------------


def _fact_summary(fact: dict[str, Any]) -> str:
    where = _key(fact["project_id"], fact["subject_id"], fact["predicate"])
    if fact["status"] == MemoryRecord.Status.DISPUTED and fact["memory_id"] is None:
        values = "; ".join(
            f"{_show(c['value'])} (from {c['source']['canonical_ref']} {c['source']['revision']})"
            for c in fact["candidates"]
        )
        return (
            f"{where} is DISPUTED: sources disagree and no rule orders them. Candidates: {values}. "
            f"There is no current value; do not choose one. An owner must resolve dispute {fact['dispute_id']}."
        )
    text = (
        f"{where} = {_show(fact['value'])} (status {fact['status']}, {fact['freshness']}, "
        f"last verified {fact['last_verified_at'] or 'never'}; memory {fact['memory_id']} revision {fact['revision']})."
    )
    if fact["caveat"]:
        text += f" Caveat: {fact['caveat']}"
    text += " Safe to act on." if fact["action_allowed"] else " Not to be acted on without verification."
    return text


def _register_loaded(principal: Principal, fact: dict[str, Any], session_id: str | None) -> str | None:
    """What an agent recalled into a session is a loaded context: a later supersession sends it a notice."""
    if not session_id or not fact.get("memory_id"):
        return None
    load = lineage.register_context_load(
        principal,
        session_id=session_id,
        bases=[BaseRef(fact["memory_id"], fact["revision"])],
        expires_at=timezone.now() + CONTEXT_HOLD,
    )
    return load.public_id


def _fact(
    principal: Principal,
    key: tuple[str, str, str],
    purpose: reads.Purpose,
    valid_at: datetime | None,
    known_at: datetime | None,
) -> dict[str, Any]:
    """The read of `GET /facts/current/`, the same steps in the same order (api/views.CurrentFactViewSet)."""
    if purpose == "answer" and valid_at is None and known_at is None:
        cached = caches.cached_answer(principal.tenant_pk, *key)
        if cached is not None:
            return dict(cached)
        view = reads.fact_view(principal, *key)
        answer = dict(records.FactSerializer(view, context={"key": key}).data)
        caches.remember_answer(principal.tenant_pk, *key, answer, view.record)
        return answer
    if purpose == "action":
        # The one read for acting (memory.receipts): verify first, read, and leave the signed receipt; a refusal's
        # error carries its receipt_id.
        view, receipt = receipts.read_for_action(principal, *key, valid_at=valid_at, known_at=known_at)
        return {**records.FactSerializer(view, context={"key": key}).data, "receipt_id": receipt.public_id}
    view = reads.fact_view(principal, *key, purpose=purpose, valid_at=valid_at, known_at=known_at)
    return dict(records.FactSerializer(view, context={"key": key}).data)


def recall(
    principal: Principal,
    *,
    project_id: str,
    subject_id: str,
    predicate: str,
    purpose: str = "answer",
    session_id: str | None = None,
) -> Answer:
    query = _parse(
        records.FactQuerySerializer,
        {"project_id": project_id, "subject_id": subject_id, "predicate": predicate, "purpose": purpose},
    )
    key = (query["project_id"], query["subject_id"], query["predicate"])
    fact = _fact(principal, key, query["purpose"], None, None)
    load_id = _register_loaded(principal, fact, (session_id or "").strip()[:200] or None)
    if load_id:
        fact["context_load_id"] = load_id
    return Answer(fact, _fact_summary(fact), memory_id=fact.get("memory_id"))


def recall_as_of(
    principal: Principal,
    *,
    project_id: str,
    subject_id: str,
    predicate: str,
    valid_at: str | None = None,
    known_at: str | None = None,
) -> Answer:
    if not valid_at and not known_at:
        raise exceptions.ValidationError({"valid_at": ["Give valid_at, known_at or both (use recall for now)."]})
    query = _parse(
        records.FactQuerySerializer,
        {
            "project_id": project_id,
            "subject_id": subject_id,
            "predicate": predicate,
            "valid_at": valid_at,
            "known_at": known_at,
        },
    )
    key = (query["project_id"], query["subject_id"], query["predicate"])
    fact = _fact(principal, key, "answer", query.get("valid_at"), query.get("known_at"))
    fact["valid_at"], fact["known_at"] = valid_at, known_at
    axes = ", ".join(f"{name} {when}" for name, when in (("valid at", valid_at), ("as known at", known_at)) if when)
    return Answer(fact, f"As of {axes}: {_fact_summary(fact)}", memory_id=fact.get("memory_id"))


# --- history, search, conflicts ---------------------------------------------------------------------------


def history(
    principal: Principal,
    *,
    memory_id: str | None = None,
    project_id: str | None = None,
    subject_id: str | None = None,
    predicate: str | None = None,
) -> Answer:
    if memory_id:
        record = actions.get_record(principal, memory_id)
        key = (record.project.key, record.subject_id, record.predicate)
    else:
        if not (project_id and subject_id and predicate):
            raise exceptions.ValidationError(
                {"memory_id": ["Give memory_id, or project_id, subject_id and predicate."]}
            )
        query = _parse(
            records.FactQuerySerializer, {"project_id": project_id, "subject_id": subject_id, "predicate": predicate}
        )
        key = (query["project_id"], query["subject_id"], query["predicate"])
    chain = reads.history(principal, *key)
    if not chain:
        raise NotFound(f"Nothing is recorded for {_key(*key)}.")
    results = [record_payload(r) for r in chain]
    lines = [
        f"r{r['revision']} {r['status']}: {_show(r['value'])} valid {r['valid_from']} to {r['valid_to'] or 'open'}"
        f" (recorded {r['recorded_from']}, source {r['source']['canonical_ref']} {r['source']['revision']})"
        for r in results
    ]
    summary = f"History of {_key(*key)}, oldest first:\n" + "\n".join(lines)
    payload = {"project_id": key[0], "subject_id": key[1], "predicate": key[2], "results": results}
    return Answer(payload, summary, memory_id=chain[-1].memory_id)


class _SearchArgs(serializers.Serializer[Any]):
    project_id = fields.IdentifierField("project_id", required=False)
    subject_id = fields.IdentifierField("subject_id", required=False)
    predicate = fields.IdentifierField("predicate", required=False)
    q = serializers.CharField(max_length=2000)
    k = serializers.IntegerField(min_value=1, max_value=100, default=10)


def search_memory(
    principal: Principal,
    *,
    q: str,
    project_id: str | None = None,
    k: int = 10,
    subject_id: str | None = None,
    predicate: str | None = None,
) -> Answer:
    data = _parse(
        _SearchArgs, {"q": q, "project_id": project_id, "k": k, "subject_id": subject_id, "predicate": predicate}
    )
    found = search.search(
        principal,
        project_id=data.get("project_id"),
        q=data["q"],
        k=data["k"],
        subject_id=data.get("subject_id"),
        predicate=data.get("predicate"),
    )
    hits = [hit_payload(hit) for hit in found.results]
    lines = [
        f"{h['rank']}. {h['subject_id']}.{h['predicate']} = {_show(h['value'])} ({h['status']}, memory {h['memory_id']} "
        f"r{h['revision']}, {_match(h)})"
        for h in hits
    ]
    summary = (
        f"{len(hits)} usable memories (current beliefs only), best first:\n" + "\n".join(lines)
        if hits
        else "No usable memory."
    )
    embedder = embedder_payload()
    if embedder["fallback"]:
        summary += f"\nNote: {embedder['detail']}"
    return Answer({"results": hits, "held_back": len(found.held_back), "embedder": embedder}, summary)


def _match(hit: dict[str, Any]) -> str:
    """How a hit was found, for the summary line: its cosine similarity, or a keyword match (not embedded yet)."""
    if hit["score"] is None:
        return "keyword match, just written"
    return f"similarity {hit['score']:.3f}"


def list_conflicts(principal: Principal, *, project_id: str | None = None) -> Answer:
    disputes = (
        Dispute.objects.filter(tenant_id=principal.tenant_pk, status=Dispute.Status.OPEN)
        .select_related("project", "resolved_by", "winner")
        .prefetch_related("candidates__issuer")
        .order_by("id")
    )
    if project_id:
        validation.check_identifiers(project_id=project_id)
        disputes = disputes.filter(project__key=project_id)
    results = [records.dispute_payload(d) for d in disputes[:LIST_LIMIT]]
    lines = [
        f"{d['id']}: {d['subject_id']}.{d['predicate']} in {d['project_id']}: "
        + " vs ".join(f"{_show(c['value'])} ({c['source']['canonical_ref']})" for c in d["candidates"])
        for d in results
    ]
    summary = (
        f"{len(results)} open disputes (no value is current for these until an owner resolves them):\n"
        + "\n".join(lines)
        if results
        else "No open disputes."
    )
    return Answer({"results": results}, summary)


# --- notices ----------------------------------------------------------------------------------------------


def pending_notices(principal: Principal) -> Answer:
    notices = lineage.invalidations_for(principal, principal.name, open_only=True).order_by("id")[:LIST_LIMIT]
    results = [invalidation_payload(n) for n in notices]
    lines = [
        f"{n['id']}: memory {n['memory_id']} r{n['revision']} loaded in session {n['session_id']} is no longer "
        f"current ({n['reason']}); current memory: {n['current_memory_id'] or 'none'}"
        for n in results
    ]
    summary = (
        f"{len(results)} notices: values you loaded changed. Re-read each fact (recall), replace what you hold, "
        "then acknowledge_notice(notice_id).\n" + "\n".join(lines)
        if results
        else "No pending notices: nothing you loaded has changed."
    )
    return Answer({"agent_id": principal.name, "results": results}, summary)


def acknowledge_notice(principal: Principal, *, notice_id: str) -> Answer:
    notice = lineage.acknowledge(principal, principal.name, str(notice_id)[:64])
    payload = invalidation_payload(notice)
    return Answer(payload, f"Notice {payload['id']} acknowledged at {payload['acknowledged_at']}.")


# --- request_forget ---------------------------------------------------------------------------------------


class _ForgetArgs(serializers.Serializer[Any]):
    project_id = serializers.CharField(max_length=100)
    reason = serializers.CharField(max_length=5000)


def request_forget(
    principal: Principal,
    *,
    project_id: str,
    reason: str,
    subject_id: str | None = None,
    memory_ids: list[str] | None = None,
) -> Answer:
    data = _parse(_ForgetArgs, {"project_id": project_id, "reason": reason})
    if bool(subject_id) == bool(memory_ids):
        raise exceptions.ValidationError({"scope": ["Give subject_id or memory_ids (one of them)."]})
    scope: dict[str, Any] = {"subject_id": subject_id} if subject_id else {"memory_ids": memory_ids}
    check_storable(scope)
    request = deletion_service.propose_deletion(
        principal, project_id=data["project_id"], scope=scope, reason=data["reason"]
    )
    payload = {
        "id": request.public_id,
        "project_id": data["project_id"],
        "scope": scope,
        "state": request.state,
        "reason": request.reason,
        "reason_redacted": request.reason_redacted,
        "requested_at": request.accepted_at.isoformat(),
        "next_step": "Compliance staff must approve this request; nothing is deleted until they do. "
        "Until then the memory stays readable; stop using it if it must not be used.",
    }
    said = f"Deletion request {request.public_id} filed, awaiting compliance approval. Nothing is deleted yet."
    if request.reason_redacted:
        said += " Values being forgotten were cut out of your reason; next time say why, not what."
    return Answer(payload, said)


# --- the registry -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolBody:
    fn: Callable[..., Answer]
    scope: str  # the API throttle budget the call counts against (lib/throttling)


BODIES: dict[str, ToolBody] = {
    "remember": ToolBody(remember, WRITES),
    "recall": ToolBody(recall, READS),
    "recall_as_of": ToolBody(recall_as_of, READS),
    "history": ToolBody(history, READS),
    "search_memory": ToolBody(search_memory, SEARCH),
    "list_conflicts": ToolBody(list_conflicts, READS),
    "pending_notices": ToolBody(pending_notices, READS),
    "acknowledge_notice": ToolBody(acknowledge_notice, WRITES),
    "request_forget": ToolBody(request_forget, WRITES),
}


# --- refusals ---------------------------------------------------------------------------------------------

_NEXT_STEP = {
    "revision_conflict": "Someone changed this fact since you read it. Call recall to read the current value, "
    "decide whether your value still applies, then call remember again with expected_revision set to the current "
    "revision. Do not retry blindly.",
    "expected_revision_required": "This fact already has a current value. Call recall (or history) to read it, "
    "then call remember again with expected_revision set to its revision.",
    "issuer_not_authorized": "You are not an authorized source for this field; the value was not stored.",
    "recheck_required": "Do not act on this value. It could not be verified against its canonical source now. "
    "Tell the user the last verified value and when it was verified, and that it could not be confirmed.",
    "fact_disputed": "Do not act: sources disagree and an owner must resolve the dispute first.",
    "tombstoned": "This content was deleted on request and may not be written or used again (detail says which "
    "rule refused it). A new fact, valid from now, from a new source and with a value that was not deleted, is "
    "accepted.",
    "not_found": "Nothing usable is recorded for what you asked.",
    "forbidden": "Your role may not do this, and nothing changed. A person with the right role (an owner, an admin "
    "or compliance staff) can do it in the dashboard.",
    "dispute_open": "Sources disagree on this fact and an owner must resolve the dispute first; nothing was stored. "
    "Call list_conflicts to see both values; do not retry until it is resolved.",
    "invalid_state": "What you named is no longer in a state that allows this (detail says which). Read it again "
    "before deciding what to do.",
    "base_not_current": "A fact this work was derived from has changed since you read it. Call recall for its "
    "current value and redo the work from that.",
    "authentication_failed": "Check the bearer token: it may be mistyped, revoked or expired. An admin issues a new "
    "one in the dashboard.",
    "not_authenticated": "Send the bearer token an admin issued to you.",
    "index_rebuild_needed": "Search is unavailable until the operator re-embeds the index (detail says how). Read "
    "facts you know the key of with recall meanwhile.",
    "internal_error": "The server failed to answer. Whether a write took effect is unknown: read before you retry it.",
    "throttled": "Too many calls; wait retry_after seconds before calling again.",
    "service_unavailable": "A service behind the memory is down for a moment and nothing of this call was applied; "
    "wait retry_after seconds (or a few seconds) and call again.",
    "invalid": "Fix the arguments named in errors and call again.",
    "certificate_not_ready": "The deletion's purge is not confirmed yet; its certificate is issued once every store "
    "has been purged and read again empty. Compliance staff download it later.",
}
# Where a code's general next step is not true of one tool's case.
_TOOL_NEXT_STEP = {
    ("acknowledge_notice", "not_found"): "No open notice of yours has this id: call pending_notices for the ids "
    "you may acknowledge.",
    ("history", "not_found"): "No record has this memory id: take one from recall or search_memory.",
}


def invalid_arguments(error: ValidationError, tool: str) -> Answer:
    """Arguments the tool's input schema refused (a missing one, or one of the wrong type), in the product's shape:
    each argument named with the reason, never the value given."""
    errors: dict[str, list[str]] = {}
    for problem in error.errors():
        # The argument itself (a union's members add their type to the location: one argument, several reasons).
        name = str(problem["loc"][0]) if problem["loc"] else "arguments"
        reasons = errors.setdefault(name, [])
        if str(problem["msg"]) not in reasons:
            reasons.append(str(problem["msg"]))
    return refusal(exceptions.ValidationError(errors), tool=tool)


def failure(*, tool: str) -> Answer:
    """A call the server failed to answer (logged by type only): the product's shape, with what to do next."""
    return _with_next_step({"code": "internal_error", "detail": "The server failed to answer this call."}, tool)


def refusal(exc: Exception, *, tool: str = "") -> Answer:
    """A refused call as an answer: the API's error payload, plus what to do next (for `tool`'s case)."""
    if isinstance(exc, DomainError):
        payload = {
            key: record_payload(value) if isinstance(value, MemoryRecord) else value
            for key, value in exc.as_payload().items()
        }
    elif isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        payload = {
            "code": "invalid",
            "detail": f"Invalid input: {', '.join(sorted(str(k) for k in errors))}.",
            "errors": json.loads(json.dumps(errors)),
        }
    elif isinstance(exc, exceptions.APIException):
        payload = {"code": str(exc.default_code), "detail": str(exc.detail)}
    else:
        raise exc
    return _with_next_step(payload, tool)


def next_step_for(tool: str, code: str) -> str | None:
    """What an agent should do after `tool` answered the error `code`: the tool's own case first, else the code's."""
    return _TOOL_NEXT_STEP.get((tool, code)) or _NEXT_STEP.get(code)


def _with_next_step(payload: dict[str, Any], tool: str) -> Answer:
    code = str(payload["code"])
    summary = f"{'Failed' if code == 'internal_error' else 'Refused'} ({code}): {payload['detail']}"
    if code == "recheck_required":
        summary = (
            f"DO NOT ACT. The last verified value is {_show(payload.get('last_verified_value'))} "
            f"(verified at {payload.get('last_verified_at') or 'never'}); it could not be confirmed now. "
            f"{payload['detail']}"
        )
    next_step = next_step_for(tool, code)
    if next_step:
        payload["next_step"] = next_step
        summary += f" Next: {next_step}"
    current = payload.get("current")
    memory_id = current.get("memory_id") if isinstance(current, dict) else payload.get("memory_id")
    return Answer(payload, summary, error=True, memory_id=memory_id if isinstance(memory_id, str) else None)
