"""The OpenAPI schema class of the API: every operation documents, beside its own answers, the error
answers any endpoint may give, in the one error shape (`ErrorSerializer`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular import openapi

from memory_admin.lib.api_errors import ErrorSerializer

# What any endpoint may answer besides its success: bad input, authentication, permission, missing,
# method, state conflicts, deleted content, size, media type and the compare-and-swap's 428.
ERROR_STATUSES = (400, 401, 403, 404, 405, 409, 410, 413, 415, 428)


class AutoSchema(openapi.AutoSchema):  # type: ignore[misc]
    def _get_response_bodies(self, direction: Any = "response") -> Any:
        bodies = super()._get_response_bodies(direction)
        if direction == "response":
            for code in map(str, ERROR_STATUSES):
                if code not in bodies:
                    bodies[code] = self._get_response_for_code(ErrorSerializer, code, direction=direction)
        return bodies
