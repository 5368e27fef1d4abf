"""Domain errors of memory (and the layers above it). Each carries the API's error code and HTTP status,
so every door reports alike; their base, DomainError, is in the kernel (memory_admin.lib.errors)."""

from __future__ import annotations

from memory_admin.lib.errors import DomainError as DomainError  # re-exported: every layer catches it here


class InvalidInput(DomainError):
    code = "invalid"
    status = 400

    def __init__(self, errors: dict[str, list[str]]) -> None:
        fields = ", ".join(sorted(errors))
        super().__init__(f"Invalid input: {fields}.", errors=errors)


class NotFound(DomainError):
    code = "not_found"
    status = 404


class Forbidden(DomainError):
    code = "forbidden"
    status = 403


class IssuerNotAuthorized(DomainError):
    code = "issuer_not_authorized"
    status = 403


class RevisionConflict(DomainError):
    code = "revision_conflict"
    status = 409


class ExpectedRevisionRequired(DomainError):
    code = "expected_revision_required"
    status = 428


class DisputeOpen(DomainError):
    code = "dispute_open"
    status = 409


class InvalidState(DomainError):
    code = "invalid_state"
    status = 409


class RecheckRequired(DomainError):
    code = "recheck_required"
    status = 409


class FactDisputed(DomainError):
    code = "fact_disputed"
    status = 409


class BaseNotCurrent(DomainError):
    code = "base_not_current"
    status = 409


class Tombstoned(DomainError):
    """The write would bring back content a deletion removed."""

    code = "tombstoned"
    status = 410
