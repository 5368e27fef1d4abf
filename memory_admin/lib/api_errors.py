"""Every API error is JSON `{"code": ..., "detail": ...}` (plus `errors` for invalid input), whatever raised it.

A domain error may carry objects in its extra fields (a 409 `revision_conflict` carries the current
record); the layer that owns such an object registers how the API shows it (`register_shape`), so this
kernel module knows no app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from memory_admin.lib.errors import DomainError

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

_SHAPES: dict[type, Callable[[Any], Any]] = {}


def register_shape(kind: type, shape: Callable[[Any], Any]) -> None:
    """Show values of `kind` found in a domain error's extra fields as `shape(value)`."""
    _SHAPES[kind] = shape


def _jsonable(value: Any) -> Any:
    for kind, shape in _SHAPES.items():
        if isinstance(value, kind):
            return shape(value)
    return value


class ErrorSerializer(serializers.Serializer[Any]):
    """The shape of every 4xx answer (documented in the schema; rendered by `exception_handler`).

    Some errors carry more fields (a 409 `revision_conflict` carries `current`, a 409 `recheck_required`
    the last verified value); they are named in PRODUCT.md and allowed here as additional properties."""

    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(required=False)  # type: ignore[assignment]  # `errors` is a DRF name too


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        payload = {key: _jsonable(value) for key, value in exc.as_payload().items()}
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return Response(payload, status=exc.status, headers=headers)
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
