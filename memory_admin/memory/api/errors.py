"""Every API error is JSON `{"code": ..., "detail": ...}`, whatever raised it."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from memory_admin.memory.errors import DomainError
from memory_admin.memory.models import MemoryRecord

_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "parse_error",
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, MemoryRecord):
        from memory_admin.memory.api.serializers import record_payload

        return record_payload(value)
    return value


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        payload = {key: _jsonable(value) for key, value in exc.as_payload().items()}
        return Response(payload, status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {
                "code": "payload_too_large",
                "detail": "The request body is larger than this API accepts.",
            },
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        fields = ", ".join(sorted(str(k) for k in errors))
        response.data = {
            "code": "invalid",
            "detail": f"Invalid input: {fields}.",
            "errors": errors,
        }
    elif isinstance(exc, exceptions.APIException):
        response.data = {
            "code": _CODES.get(type(exc), exc.default_code),
            "detail": str(exc.detail),
        }
    return response
