"""Domain errors. Each carries the API's error code and HTTP status, so every door reports alike."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "error"
    status = 400

    def __init__(self, detail: str, *, code_override: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
        if code_override:
            self.code = code_override

    def as_payload(self) -> dict[str, Any]:
        return {"code": self.code, "detail": self.detail, **self.extra}


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
