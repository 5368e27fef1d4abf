"""Exceptions carrying the API's error code (`{"code": ..., "detail": ...}` answers), one class per code
a caller is expected to handle; any other code is an `ApiError` with that code."""

from __future__ import annotations

from typing import Any, cast

from memory_governance.types import Record


class ApiError(Exception):
    """An answer of 4xx/5xx from the API: `code` (the API's error code), `status` (HTTP), `detail`
    (the API's sentence), and `payload` (the whole JSON answer, extra fields included)."""

    code: str = "error"

    def __init__(self, status: int, code: str, detail: str, payload: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.payload: dict[str, Any] = payload or {}


class InvalidInput(ApiError):
    """400 `invalid`: `errors` names each refused field."""

    code = "invalid"

    @property
    def errors(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.payload.get("errors") or {})


class AuthenticationFailed(ApiError):
    """401: no token, or a token that is unknown, revoked or expired."""

    code = "authentication_failed"


class Forbidden(ApiError):
    """403 `forbidden`: the principal's role does not allow this."""

    code = "forbidden"


class IssuerNotAuthorized(Forbidden):
    """403 `issuer_not_authorized`: this principal may not write (or verify) this field."""

    code = "issuer_not_authorized"


class NotFound(ApiError):
    """404 `not_found` (another tenant's object is a 404 too)."""

    code = "not_found"


class Conflict(ApiError):
    """A 409 of any kind."""

    code = "conflict"

    @property
    def receipt_id(self) -> str | None:
        """A refused read for acting (`recheck_required`, `fact_disputed`): its signed decision receipt."""
        return cast("str | None", self.payload.get("receipt_id"))


class RevisionConflict(Conflict):
    """409 `revision_conflict`: `expected_revision` is stale. `current` is the fact's current record (the
    one to re-read and decide against), or None when the fact has no current record."""

    code = "revision_conflict"

    @property
    def current(self) -> Record | None:
        return cast("Record | None", self.payload.get("current"))


class ExpectedRevisionRequired(ApiError):
    """428 `expected_revision_required`: the fact has a current record; send its revision as
    `expected_revision` (`current` carries it)."""

    code = "expected_revision_required"

    @property
    def current(self) -> Record | None:
        return cast("Record | None", self.payload.get("current"))


class RecheckRequired(Conflict):
    """409 `recheck_required`: acting needs a freshly verified value and there is none. The last verified
    value and when it was verified are carried (`last_verified_value`, `last_verified_at`)."""

    code = "recheck_required"

    @property
    def memory_id(self) -> str | None:
        return cast("str | None", self.payload.get("memory_id"))

    @property
    def last_verified_value(self) -> Any:
        return self.payload.get("last_verified_value")

    @property
    def last_verified_at(self) -> str | None:
        return cast("str | None", self.payload.get("last_verified_at"))

    @property
    def recheck_after(self) -> str | None:
        return cast("str | None", self.payload.get("recheck_after"))

    @property
    def caveat(self) -> str | None:
        return cast("str | None", self.payload.get("caveat"))


class DisputeOpen(Conflict):
    """409 `dispute_open`: the fact is disputed; an owner resolves it before a new value is asserted."""

    code = "dispute_open"


class FactDisputed(Conflict):
    """409 `fact_disputed`: no value of a disputed fact may be acted on."""

    code = "fact_disputed"


class InvalidState(Conflict):
    """409 `invalid_state`: the object is not in a state that allows this (e.g. expiring an excluded record)."""

    code = "invalid_state"


class BaseNotCurrent(Conflict):
    """409 `base_not_current`: a summary/action names a base revision that is no longer current."""

    code = "base_not_current"


class Tombstoned(ApiError):
    """410 `tombstoned`: the write would bring back deleted content (or the object was deleted)."""

    code = "tombstoned"


class Throttled(ApiError):
    """429 `throttled`: over a budget; `retry_after` seconds (from the header), when given."""

    code = "throttled"

    @property
    def retry_after(self) -> float | None:
        value = self.payload.get("_retry_after")
        return float(value) if value is not None else None


class BatchNotApplied(ApiError):
    """422 `batch_not_applied`: an atomic batch with a failing item wrote nothing. `failed` lists the indexes of
    the items that failed on their own; `results` has every item's result (the others' outcome `not_applied`)."""

    code = "batch_not_applied"

    @property
    def failed(self) -> list[int]:
        return cast(list[int], self.payload.get("failed") or [])

    @property
    def results(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self.payload.get("results") or [])


class ServiceUnavailable(ApiError):
    """503 after the client's retries ran out."""

    code = "service_unavailable"


ERRORS_BY_CODE: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        InvalidInput,
        AuthenticationFailed,
        Forbidden,
        IssuerNotAuthorized,
        NotFound,
        RevisionConflict,
        ExpectedRevisionRequired,
        RecheckRequired,
        DisputeOpen,
        FactDisputed,
        InvalidState,
        BaseNotCurrent,
        Tombstoned,
        Throttled,
        BatchNotApplied,
    )
}
ERRORS_BY_CODE["not_authenticated"] = AuthenticationFailed

# A code this client does not name still maps to the class of its status.
ERRORS_BY_STATUS: dict[int, type[ApiError]] = {
    401: AuthenticationFailed,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: Throttled,
    503: ServiceUnavailable,
}
