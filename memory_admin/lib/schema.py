"""The OpenAPI schema class of the API: every operation documents, beside its own answers, the error
answers any endpoint may give, in the one error shape (`ErrorSerializer`)."""

from __future__ import annotations

from typing import Any

import uritemplate
from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import get_view_model, resolve_regex_path_parameter
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

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

    def get_override_parameters(self) -> Any:
        """A path variable the schema cannot type from the view's model or URL pattern is a string (the
        public ids these views look up); declared here so `check --deploy` has nothing to warn about
        and the schema says exactly what drf-spectacular defaulted to."""
        declared = list(super().get_override_parameters())
        named = {p.name for p in declared if isinstance(p, OpenApiParameter)}
        if get_view_model(self.view, emit_warnings=False) is not None:
            return declared
        untyped = [
            OpenApiParameter(variable, OpenApiTypes.STR, OpenApiParameter.PATH)
            for variable in uritemplate.variables(self.path)
            if variable not in named and resolve_regex_path_parameter(self.path_regex, variable) is None
        ]
        return declared + untyped


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[misc]
    """Agents authenticate with `Authorization: Bearer <token>` (memory_admin.accounts.auth); named by
    path so this module imports nothing above it."""

    target_class = "memory_admin.accounts.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class ISODurationFieldType(OpenApiSerializerFieldExtension):  # type: ignore[misc]
    target_class = "memory_admin.shapes.fields.ISODurationField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, str]:
        return {"type": "string", "format": "duration", "example": "P1D"}


class IdentifierFieldType(OpenApiSerializerFieldExtension):  # type: ignore[misc]
    """An identifier publishes the pattern its field names (`schema_pattern`: a strict subset of the rule, since
    JSON Schema's regular expressions have no portable Unicode classes; memory.validation); the field's
    `max_length` adds `maxLength`, counted in code points as the API counts it. Named by path, as above."""

    target_class = "memory_admin.shapes.fields.IdentifierField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "pattern": self.target.schema_pattern, "minLength": 1}
