"""Expiry requests (memory.expiry): an agent asks that a record be expired, an owner or admin decides.

`POST /api/v1/records/{memory_id}/expiry-requests/` (RecordViewSet) files one; `GET /api/v1/expiry-requests/`
lists them for curators, `POST /api/v1/expiry-requests/{id}/approve/` and `.../decline/` decide.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from memory_admin.accounts.models import principal_of
from memory_admin.memory import expiry
from memory_admin.memory.errors import InvalidInput, NotFound
from memory_admin.memory.models import ExpiryRequest
from memory_admin.shapes.fields import IsoDateTimeField, PrincipalNameField


class ExpiryRequestSerializer(serializers.Serializer):
    """One expiry request, with the key and revision of the record it asks to expire."""

    id = serializers.CharField(source="public_id")
    memory_id = serializers.CharField(source="record.memory_id")
    revision = serializers.IntegerField(source="record.revision")
    project_id = serializers.CharField(source="record.project.key")
    subject_id = serializers.CharField(source="record.subject_id")
    predicate = serializers.CharField(source="record.predicate")
    status = serializers.ChoiceField(choices=ExpiryRequest.Status.choices)
    reason = serializers.CharField()
    requested_by = PrincipalNameField()
    created_at = IsoDateTimeField()
    decided_at = IsoDateTimeField(allow_null=True)
    decided_by = PrincipalNameField(allow_null=True)
    decision_reason = serializers.CharField(allow_blank=True)


def expiry_payload(request: ExpiryRequest) -> dict[str, Any]:
    return ExpiryRequestSerializer(request).data


class FiledExpirySerializer(ExpiryRequestSerializer):
    """Answer of `POST /records/{memory_id}/expiry-requests/`: the request, and whether this call filed it (201) or
    found it already pending (200)."""

    created = serializers.BooleanField()


class ExpiryReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class DecisionSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ExpiryRequestViewSet(viewsets.GenericViewSet):
    """Curators' queue of agents' expiry requests."""

    lookup_url_kwarg = "request_id"
    lookup_value_regex = r"[A-Za-z0-9-]{1,64}"
    serializer_class = ExpiryRequestSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=list(ExpiryRequest.Status.values), description="default pending")
        ],
        responses=ExpiryRequestSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        wanted = request.query_params.get("status", ExpiryRequest.Status.PENDING)
        if wanted not in ExpiryRequest.Status.values:
            raise InvalidInput({"status": [f"One of {', '.join(ExpiryRequest.Status.values)}."]})
        found = expiry.pending_requests(principal_of(request), status=wanted)
        return Response({"results": [expiry_payload(r) for r in found]})

    @extend_schema(responses=ExpiryRequestSerializer)
    def retrieve(self, request: Request, request_id: str) -> Response:
        principal = principal_of(request)
        found = expiry.get_request(principal, request_id)
        if found.requested_by_id != principal.pk and not principal.can_curate:
            raise NotFound(f"No expiry request {request_id!r}.")
        return Response(expiry_payload(found))

    @extend_schema(request=DecisionSerializer, responses=ExpiryRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, request_id: str) -> Response:
        """Expire the record now (kept as history), with the request's reason or the one given."""
        return self._decide(request, request_id, approve=True)

    @extend_schema(request=DecisionSerializer, responses=ExpiryRequestSerializer)
    @action(detail=True, methods=["post"])
    def decline(self, request: Request, request_id: str) -> Response:
        """Leave the record as it is; the reason (required) is kept with the request."""
        return self._decide(request, request_id, approve=False)

    def _decide(self, request: Request, request_id: str, *, approve: bool) -> Response:
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decided = expiry.decide_expiry(
            principal_of(request), request_id, approve=approve, reason=body.validated_data["reason"]
        )
        return Response(expiry_payload(expiry.get_request(principal_of(request), decided.public_id)))
