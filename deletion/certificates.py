"""The signed deletion certificate (issue 35, item 2): what a deletion request found, removed and re-read empty
in every store, the four stage times and until when backups still hold the data; signed with the server's key
(`lib.signing.sign_document`), so a third party verifies it offline (`memory-governance verify FILE --key PEM`).

Built from the request's stages and its per-store rows (the evidence each store's `verify` wrote: the query it
ran again and what it found), never from the erased content: the scope is told in words with its identifiers (a
subject id, a field's name, memory ids, which the request keeps too), and the request's free-text reason is left
out, since it may quote what was erased.

Only a request whose purge is confirmed has one (`CertificateNotReady` before: 409 `certificate_not_ready`).
The document is deterministic: built again from the same rows and signed with the same key (Ed25519 signatures
are deterministic), it is the same bytes, so two downloads of one certificate are identical.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from deletion import service
from deletion.models import DeletionRequest
from deletion.stores import STORES
from memory_admin.accounts.models import Principal
from memory_admin.lib import signing
from memory_admin.memory.errors import DomainError, Forbidden

KIND = "deletion_certificate"
FORMAT = 1
ScopeKind = DeletionRequest.ScopeKind

STATEMENT = (
    "Each store listed was searched for the scope, purged, and read again by the query named in its verification, "
    "which found what 'remaining' says. Backups taken before the purge hold the data until the date given. This "
    "certificate does not claim the data is completely forgotten."
)


class CertificateNotReady(DomainError):
    """A certificate is issued only once every store's purge is confirmed."""

    code = "certificate_not_ready"
    status = 409


def may_read_certificate(principal: Principal) -> bool:
    """Compliance staff (the tenant's auditors) download certificates; owners and admins follow the report."""
    return principal.has_role("compliance")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _signable(value: Any) -> Any:
    """Evidence as the canonical form takes it: a float (a compaction's timing, say) becomes its decimal text,
    since signed documents carry no floating-point numbers (memory_governance.trust)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(key): _signable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_signable(item) for item in value]
    return value


def scope_in_words(request: DeletionRequest) -> dict[str, Any]:
    """The scope as filed, in words and identifiers: never a value that was erased."""
    project = request.project.key
    value = request.scope_value
    if request.scope_kind == ScopeKind.SUBJECT:
        words = f"Every record about subject {value} in project {project}, with its history and every copy of it."
    elif request.scope_kind == ScopeKind.PREDICATE:
        words = f"Every record of the field {value} in project {project}, with its history and every copy of it."
    else:
        count = len(value or [])
        words = f"{count} memory record{'' if count == 1 else 's'} in project {project}, with every copy of them."
    return {"kind": request.scope_kind, "identifiers": value, "description": words}


def _store_entry(progress: Any) -> dict[str, Any]:
    store = STORES.get(progress.store)
    evidence = {key: item for key, item in dict(progress.evidence or {}).items() if key != "samples"}
    return {
        "store": progress.store,
        "label": store.label if store is not None and store.label else progress.store,
        "found": progress.found,
        "hidden": progress.hidden,
        "purged": progress.purged,
        "remaining": progress.remaining,
        "purge_verified_at": _iso(progress.verified_at),
        "verification": _signable(evidence),
    }


def build(request: DeletionRequest) -> dict[str, Any]:
    """The unsigned certificate of a purge-confirmed request (CertificateNotReady otherwise)."""
    if request.purge_confirmed_at is None or request.state != DeletionRequest.State.PURGE_CONFIRMED:
        raise CertificateNotReady(
            "The purge of this request is not confirmed yet; its certificate is issued once every store has been "
            "purged and read again empty.",
            state=request.state,
        )
    stores = sorted(request.stores.all(), key=lambda p: p.pk)
    return {
        "kind": KIND,
        "format": FORMAT,
        "request_id": request.public_id,
        "tenant": request.tenant.slug,
        "project_id": request.project.key,
        "scope": scope_in_words(request),
        "requested_by": request.requested_by.name,
        "approved_by": request.approved_by.name if request.approved_by else None,
        "stages": {
            "accepted_at": _iso(request.accepted_at),
            "removed_from_reads_at": _iso(request.removed_from_reads_at),
            "purge_confirmed_at": _iso(request.purge_confirmed_at),
            "backups_hold_until": _iso(request.backups_expire_at),
        },
        "backups_note": request.backups_note,
        "stores": [_store_entry(progress) for progress in stores],
        "totals": {
            "found": sum(p.found for p in stores),
            "purged": sum(p.purged for p in stores),
            "remaining": sum(p.remaining or 0 for p in stores),
        },
        "statement": STATEMENT,
    }


def certificate(principal: Principal, public_id: str) -> dict[str, Any]:
    """The signed certificate of one request of the principal's tenant: 404 for a request it cannot see (another
    tenant's, or a role that follows no deletion), 403 for a role that follows them but is not compliance, 409
    `certificate_not_ready` before the purge is confirmed."""
    request = service.get_request(principal, public_id)
    if not may_read_certificate(principal):
        raise Forbidden("Only compliance staff download deletion certificates.")
    return signing.sign_document(build(request))
