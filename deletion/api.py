"""API of deletion requests (compliance staff file and approve; owners and admins look on)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from deletion import service
from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal
from memory_admin.memory.api.pagination import NewestFirstCursorPagination
from memory_admin.memory.errors import Forbidden, InvalidState


def _principal(request: Request) -> Principal:
    return request.user  # type: ignore[return-value]


class DeletionInSerializer(serializers.Serializer):
    project_id = serializers.CharField(max_length=100)
    scope = serializers.JSONField()
    reason = serializers.CharField(max_length=5000, allow_blank=True)
    due_by = serializers.DateField(required=False, allow_null=True)
    dry_run = serializers.BooleanField(default=False)
    # What a dry run answered: when cited, the request is filed only if it names the previewed project and
    # scope (409 `preview_mismatch`; 400 `preview_invalid`/`preview_expired` for a bad id). Optional, so
    # clients that file without a preview keep working; the dashboard always cites one.
    preview_id = serializers.CharField(max_length=4000, required=False)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, allow_blank=True, default="")


class DeletionRequestViewSet(viewsets.ViewSet):
    lookup_field = "request_id"

    @extend_schema(request=DeletionInSerializer)
    def create(self, request: Request) -> Response:
        body = DeletionInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data.get("preview_id") and not data["dry_run"]:
            filed, drift = service.file_previewed(
                _principal(request), preview_id=data["preview_id"], project_id=data["project_id"],
                scope=data["scope"], reason=data["reason"], due_by=data.get("due_by"),
            )  # fmt: skip
            return Response(
                {**service.report(filed), "preview": drift.as_payload(data["preview_id"])},
                status=status.HTTP_202_ACCEPTED,
            )
        result = service.request_deletion(
            _principal(request), project_id=data["project_id"], scope=data["scope"], reason=data["reason"],
            due_by=data.get("due_by"), dry_run=data["dry_run"],
        )  # fmt: skip
        if isinstance(result, service.Preview):
            return Response({
                "dry_run": True, "preview_id": result.preview_id,
                "preview_expires_at": result.expires_at.isoformat() if result.expires_at else None,
                "stores": [{"store": k, **v} for k, v in result.stores.items()],
            })  # fmt: skip
        return Response(service.report(result), status=status.HTTP_202_ACCEPTED)

    def list(self, request: Request) -> Response:
        principal = _principal(request)
        if not principal.has_role("compliance", "owner", "admin"):
            return Response({"next": None, "previous": None, "results": []})  # the cursor-page shape
        requests = DeletionRequest.objects.filter(tenant_id=principal.tenant_id).select_related(
            "project", "requested_by", "approved_by"
        )
        paginator = NewestFirstCursorPagination()
        page = paginator.paginate_queryset(requests, request, view=self)
        return paginator.get_paginated_response([service.report(r) for r in page or []])

    def retrieve(self, request: Request, request_id: str) -> Response:
        return Response(service.report(service.get_request(_principal(request), request_id)))

    @action(detail=True, methods=["post"])
    def approve(self, request: Request, request_id: str) -> Response:
        return Response(
            service.report(service.approve(_principal(request), request_id)), status=status.HTTP_202_ACCEPTED
        )

    @extend_schema(request=ReasonSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, request_id: str) -> Response:
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(service.report(service.cancel(_principal(request), request_id, body.validated_data["reason"])))

    @action(detail=True, methods=["post"])
    def retry(self, request: Request, request_id: str) -> Response:
        """Requeue the stores that are not verified (after fixing what made them fail)."""
        principal = _principal(request)
        if not principal.has_role("compliance"):
            raise Forbidden("Only compliance staff retry deletions.")
        deletion = service.get_request(principal, request_id)
        if deletion.state in (DeletionRequest.State.AWAITING_APPROVAL, DeletionRequest.State.CANCELLED):
            raise InvalidState(f"A {deletion.state} request has nothing to retry.")
        service.retry_stores(deletion)
        return Response(service.report(deletion), status=status.HTTP_202_ACCEPTED)
