"""The OpenAPI schema class of the API: every operation documents, beside its own answers, the error
answers any endpoint may give, in the one error shape (`ErrorSerializer`); and every input says what the API
accepts, so a body, query or path a generated client builds from the schema is one the API takes
(tests/api/test_fuzzed_requests_match_schema.py runs schemathesis' `positive_data_acceptance` on it):

- text the API refuses when blank (after trimming) needs a character that is neither space nor control;
- path segments and query values hold no control character (`memory_admin.http_errors` refuses them);
- datetimes and dates lie in the range every door accepts (memory.validation: 1000-01-01 up to 9000-01-01
  in UTC, offsets within ±15:59); the patterns are a strict subset (years 1100-8899, days 01-28, offsets up
  to ±14:59), since a pattern cannot compare instants across offsets;
- durations are whole days or a few hours, minutes or seconds (Django's ISO 8601 reading, positive);
- lists the API refuses empty say `minItems: 1`.
Where JSON Schema cannot say the rule exactly, it says less than the API accepts, never more."""

from __future__ import annotations

from typing import Any

import uritemplate
from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import get_view_model, resolve_regex_path_parameter
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from memory_admin.lib.api_errors import ErrorSerializer

# A character that is not space (Python's or ECMA-262's idea of it) nor a control: what a non-blank text needs.
NON_BLANK_TEXT = "[^\\s\\u0000-\\u001F\\u007F-\\u00A0\\u1680\\u2000-\\u200B\\u2028\\u2029\\u202F\\u205F\\u3000\\uFEFF]"
# Free text the domain keeps without control characters (token names and revoke reasons, source refs).
_CONTROL = "\\u0000-\\u001F\\u007F-\\u009F"
CONTROL_FREE_TEXT = f"^[^{_CONTROL}]*$"
CONTROL_FREE_NON_BLANK_TEXT = f"^[^{_CONTROL}]*{NON_BLANK_TEXT}[^{_CONTROL}]*$"
# A URL path segment or query value: no control character (tab, newline and CR are refused in a path too).
URL_VALUE = "^[^\\u0000-\\u001F\\u007F]*$"
URL_SEGMENT = "^[^\\u0000-\\u001F\\u007F]+$"
_YEAR = "(?:1[1-9][0-9]{2}|[2-7][0-9]{3}|8[0-8][0-9]{2})"
DATE_PATTERN = f"^{_YEAR}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])$"
DATETIME_PATTERN = (
    f"^{_YEAR}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    "(?:\\.[0-9]{1,6})?(?:Z|[+-](?:0[0-9]|1[0-4]):[0-5][0-9])$"
)
DURATION_PATTERN = "^P(?:[1-9][0-9]{0,3}D|T[1-9][0-9]?[HMS])$"

# What any endpoint may answer besides its success: bad input, authentication, permission, missing,
# method, state conflicts, deleted content, size, media type and the compare-and-swap's 428.
ERROR_STATUSES = (400, 401, 403, 404, 405, 409, 410, 413, 415, 428)


class AutoSchema(openapi.AutoSchema):
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

    def _map_serializer_field(self, field: Any, direction: Any, bypass_extensions: bool = False) -> Any:
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        # Only what a client sends: an answer's fields are the server's (a blank `status_reason` is a fact).
        if direction == "request" and isinstance(schema, dict) and not getattr(field, "read_only", False):
            _constrain_input(field, schema)
        return schema

    def _map_basic_serializer(self, serializer: Any, direction: Any) -> Any:
        """A serializer may declare what the domain checks behind its fields and the fields themselves do not (a
        reason an action requires, a list it refuses empty, fields that go together): `schema_properties` (per
        field) and `schema_extra` (the object). The fields keep accepting more, so the domain's own message
        answers; the schema promises only what is accepted."""
        schema = super()._map_basic_serializer(serializer, direction)
        if direction != "request":
            return schema
        properties = schema.get("properties", {})
        for name, extra in getattr(serializer, "schema_properties", {}).items():
            if name in properties:
                properties[name] = {**properties[name], **extra}
        schema.update(getattr(serializer, "schema_extra", {}))
        return schema

    def get_operation(self, *args: Any, **kwargs: Any) -> Any:
        operation = super().get_operation(*args, **kwargs)
        for parameter in (operation or {}).get("parameters", []):
            _constrain_parameter(parameter)
        return operation


def _constrain_input(field: Any, schema: dict[str, Any]) -> None:
    """Add to a writable field's schema what the API checks beyond its type (see the module's docstring)."""
    kind = schema.get("type")
    if isinstance(field, serializers.JSONField) and not field.allow_null and not kind and "oneOf" not in schema:
        schema["anyOf"] = [{"type": t} for t in ("object", "array", "string", "number", "boolean")]
    if kind == "array" and getattr(field, "allow_empty", True) is False:
        schema.setdefault("minItems", 1)
    if kind != "string" or "pattern" in schema or "enum" in schema:
        return
    fmt = schema.get("format")
    if fmt == "date-time":
        schema["pattern"] = DATETIME_PATTERN
    elif fmt == "date":
        schema["pattern"] = DATE_PATTERN
    elif fmt == "duration":
        schema["pattern"] = DURATION_PATTERN
    elif fmt is None and isinstance(field, serializers.CharField) and not field.allow_blank:
        schema.setdefault("minLength", 1)
        schema["pattern"] = NON_BLANK_TEXT  # unanchored: somewhere in it


def _constrain_parameter(parameter: dict[str, Any]) -> None:
    schema = parameter.get("schema")
    if not isinstance(schema, dict) or schema.get("type") != "string" or "pattern" in schema or "enum" in schema:
        return
    fmt = schema.get("format")
    if fmt == "date-time":
        schema["pattern"] = DATETIME_PATTERN
    elif fmt == "date":
        schema["pattern"] = DATE_PATTERN
    elif fmt is None and parameter.get("in") == "path":
        schema["pattern"] = URL_SEGMENT
    elif fmt is None and parameter.get("in") == "query":
        schema["pattern"] = URL_VALUE


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Agents authenticate with `Authorization: Bearer <token>` (memory_admin.accounts.auth); named by
    path so this module imports nothing above it."""

    target_class = "memory_admin.accounts.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}


class ISODurationFieldType(OpenApiSerializerFieldExtension):
    target_class = "memory_admin.shapes.fields.ISODurationField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, str]:
        return {"type": "string", "format": "duration", "example": "P1D"}


class IdentifierFieldType(OpenApiSerializerFieldExtension):
    """An identifier publishes the pattern its field names (`schema_pattern`: a strict subset of the rule, since
    JSON Schema's regular expressions have no portable Unicode classes; memory.validation); the field's
    `max_length` adds `maxLength`, counted in code points as the API counts it. Named by path, as above."""

    target_class = "memory_admin.shapes.fields.IdentifierField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "pattern": self.target.schema_pattern, "minLength": 1}
