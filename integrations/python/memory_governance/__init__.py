"""Python client for the memory governance API (sync `Client`, async `AsyncClient`), and
`memory_governance.langgraph_store.GovernedStore` (needs the `[langgraph]` extra)."""

from memory_governance._calls import fact_body
from memory_governance._core import RetryPolicy
from memory_governance.client import AsyncClient, Client
from memory_governance.errors import (
    ApiError,
    AuthenticationFailed,
    BaseNotCurrent,
    BatchNotApplied,
    Conflict,
    DisputeOpen,
    ExpectedRevisionRequired,
    FactDisputed,
    Forbidden,
    InvalidInput,
    InvalidState,
    IssuerNotAuthorized,
    NotFound,
    RecheckRequired,
    RevisionConflict,
    ServiceUnavailable,
    Throttled,
    Tombstoned,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "AuthenticationFailed",
    "BaseNotCurrent",
    "BatchNotApplied",
    "Client",
    "Conflict",
    "DisputeOpen",
    "ExpectedRevisionRequired",
    "FactDisputed",
    "Forbidden",
    "InvalidInput",
    "InvalidState",
    "IssuerNotAuthorized",
    "NotFound",
    "RecheckRequired",
    "RetryPolicy",
    "RevisionConflict",
    "ServiceUnavailable",
    "Throttled",
    "Tombstoned",
    "fact_body",
]
