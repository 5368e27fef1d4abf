"""The base of every domain error. Each carries the API's error code and HTTP status, so every door
(API, dashboard, commands) reports alike; the specific errors live with the layer that raises them
(memory_admin.memory.errors)."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code = "error"
    status = 400
    retry_after: int | None = None  # seconds: the API answers them in Retry-After (a 503 while a service is down)

    def __init__(self, detail: str, *, code_override: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
        if code_override:
            self.code = code_override

    def as_payload(self) -> dict[str, Any]:
        return {"code": self.code, "detail": self.detail, **self.extra}
