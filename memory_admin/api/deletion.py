"""API of deletion requests (compliance staff file and approve; owners and admins look on)."""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.serializer_helpers import ReturnDict

from deletion import certificates, service
from deletion.models import DeletionRequest
from memory_admin.accounts.models import principal_of
from memory_admin.api.serializers import IsoDateTimeField
from memory_admin.lib.pagination import NewestFirstCursorPagination
from memory_admin.lib.schema import NON_BLANK_TEXT
from memory_admin.memory import validation


def _identifier(kind: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": validation.IDENTIFIER_PATTERN,
        "maxLength": validation.IDENTIFIER_MAX_LENGTH[kind],
    }


class DeletionInSerializer(serializers.Serializer):
    # The project and the scope's ids are checked by the domain (which still takes an id stored before the
    # identifier rule, so it can be deleted); the schema names the forms every new id has.
    schema_properties: ClassVar[dict[str, Any]] = {
        "project_id": {"pattern": validation.IDENTIFIER_PATTERN},
        "reason": {"minLength": 1, "pattern": NON_BLANK_TEXT},
        "scope": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {name: _identifier(name)},
                    "required": [name],
                    "additionalProperties": False,
                }
                for name in ("subject_id", "predicate")
            ]
            + [
                {
                    "type": "object",
                    "properties": {
                        "memory_ids": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
                    },
                    "required": ["memory_ids"],
                    "additionalProperties": False,
                }
            ]
        },
    }

    project_id = serializers.CharField(max_length=100)
    scope = serializers.JSONField()
    reason = serializers.CharField(max_length=5000, allow_blank=True)
    due_by = serializers.DateField(required=False, allow_null=True)
    dry_run = serializers.BooleanField(default=False)
    # What a dry run answered: when cited, the request is filed only if it names the previewed project and
    # scope (409 `preview_mismatch`; 400 `preview_invalid`/`preview_expired` for a bad id). Optional, so
    # clients that file without a preview keep working; the dashboard always cites one.
    preview_id = serializers.CharField(max_length=4000, required=False)


class CancelReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, allow_blank=True, default="")


class StoreProgressSerializer(serializers.Serializer):
    store = serializers.CharField()
    state = serializers.CharField()
    found = serializers.IntegerField()
    hidden = serializers.IntegerField()
    purged = serializers.IntegerField()
    remaining = serializers.IntegerField(allow_null=True)
    attempts = serializers.IntegerField()
    last_error = serializers.CharField(allow_blank=True)
    verified_at = IsoDateTimeField(allow_null=True)
    evidence = serializers.JSONField()


class StagesSerializer(serializers.Serializer):
    accepted_at = IsoDateTimeField(allow_null=True)
    removed_from_reads_at = IsoDateTimeField(allow_null=True)
    purge_confirmed_at = IsoDateTimeField(allow_null=True)
    backups_expire_at = IsoDateTimeField(allow_null=True)


class PreviewDriftSerializer(serializers.Serializer):
    """How the filed request differs from the preview it cites (service.Drift)."""

    preview_id = serializers.CharField()
    changed = serializers.BooleanField()
    records_changed = serializers.BooleanField()
    previewed = serializers.DictField(child=serializers.IntegerField())
    filed = serializers.DictField(child=serializers.IntegerField())


class DeletionReportSerializer(serializers.Serializer):
    """A deletion request's report (rendered by service.report, which the dashboard shows too); filed
    from a preview, it also carries `preview` (pass the drift as context `{"preview": drift payload}`)."""

    id = serializers.CharField()
    project_id = serializers.CharField()
    scope = serializers.JSONField()
    reason = serializers.CharField(allow_blank=True, help_text="as kept: the scope's values cut out")
    reason_redacted = serializers.BooleanField(
        help_text="true: values of the scope (or e-mail addresses) were found in the reason and replaced by "
        "[redacted] before it was stored or audited"
    )
    due_by = serializers.DateField(allow_null=True)
    state = serializers.ChoiceField(choices=DeletionRequest.State.choices)
    requested_by = serializers.CharField()
    approved_by = serializers.CharField(allow_null=True)
    stages = StagesSerializer()
    backups_note = serializers.CharField(allow_blank=True)
    stores = StoreProgressSerializer(many=True)
    statement = serializers.CharField()
    preview = PreviewDriftSerializer(required=False)

    def to_representation(self, instance: DeletionRequest) -> dict[str, Any]:
        answer = service.report(instance)
        if "preview" in self.context:
            answer["preview"] = self.context["preview"]
        return answer


class PreviewStoreSerializer(serializers.Serializer):
    store = serializers.CharField()
    found = serializers.IntegerField()
    samples = serializers.ListField(child=serializers.CharField())


class DeletionPreviewSerializer(serializers.Serializer):
    """Answer of a dry run: what each store holds for the scope, and the id to cite when filing."""

    dry_run = serializers.BooleanField()
    preview_id = serializers.CharField()
    preview_expires_at = IsoDateTimeField(allow_null=True)
    stores = PreviewStoreSerializer(many=True)

    def to_representation(self, instance: service.Preview) -> dict[str, Any]:
        return {
            "dry_run": True,
            "preview_id": instance.preview_id,
            "preview_expires_at": instance.expires_at.isoformat() if instance.expires_at else None,
            "stores": [{"store": k, **v} for k, v in instance.stores.items()],
        }


class CertificateStoreSerializer(serializers.Serializer):
    store = serializers.CharField()
    label = serializers.CharField()  # type: ignore[assignment]  # `label` is a DRF name too
    found = serializers.IntegerField()
    hidden = serializers.IntegerField()
    purged = serializers.IntegerField()
    remaining = serializers.IntegerField(allow_null=True)
    purge_verified_at = IsoDateTimeField(allow_null=True)
    verification = serializers.JSONField()


class CertificateStagesSerializer(serializers.Serializer):
    accepted_at = IsoDateTimeField(allow_null=True)
    removed_from_reads_at = IsoDateTimeField(allow_null=True)
    purge_confirmed_at = IsoDateTimeField()
    backups_hold_until = IsoDateTimeField(allow_null=True)


class DeletionCertificateSerializer(serializers.Serializer):
    """The signed deletion certificate (deletion.certificates; docs/deletion.md, "The signed certificate"). The
    signature covers every other member in the canonical form of docs/security.md, "Signed documents"."""

    kind = serializers.CharField()
    format = serializers.IntegerField()
    request_id = serializers.CharField()
    tenant = serializers.CharField()
    project_id = serializers.CharField()
    scope = serializers.JSONField()
    requested_by = serializers.CharField()
    approved_by = serializers.CharField(allow_null=True)
    stages = CertificateStagesSerializer()
    backups_note = serializers.CharField(allow_blank=True)
    stores = CertificateStoreSerializer(many=True)
    totals = serializers.DictField(child=serializers.IntegerField())
    statement = serializers.CharField()
    algorithm = serializers.CharField()
    key_id = serializers.CharField()
    signature = serializers.CharField()


def _report(deletion: DeletionRequest) -> ReturnDict:
    return DeletionReportSerializer(deletion).data


class DeletionRequestViewSet(viewsets.ViewSet):
    lookup_field = "request_id"
    # Used by `list` (a cursor page, newest first) and by the schema to describe that page.
    pagination_class = NewestFirstCursorPagination

    @extend_schema(
        request=DeletionInSerializer, responses={202: DeletionReportSerializer, 200: DeletionPreviewSerializer}
    )
    def create(self, request: Request) -> Response:
        body = DeletionInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data.get("preview_id") and not data["dry_run"]:
            filed, drift = service.file_previewed(
                principal_of(request),
                preview_id=data["preview_id"],
                project_id=data["project_id"],
                scope=data["scope"],
                reason=data["reason"],
                due_by=data.get("due_by"),
            )
            answer = DeletionReportSerializer(filed, context={"preview": drift.as_payload(data["preview_id"])}).data
            return Response(answer, status=status.HTTP_202_ACCEPTED)
        result = service.request_deletion(
            principal_of(request),
            project_id=data["project_id"],
            scope=data["scope"],
            reason=data["reason"],
            due_by=data.get("due_by"),
            dry_run=data["dry_run"],
        )
        if isinstance(result, service.Preview):
            return Response(DeletionPreviewSerializer(result).data)
        return Response(_report(result), status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=DeletionReportSerializer(many=True))
    def list(self, request: Request) -> Response:
        # Other roles see an empty page (service.visible_requests); the paginator orders newest first.
        requests = service.visible_requests(principal_of(request))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(requests, request, view=self)
        return paginator.get_paginated_response(DeletionReportSerializer(page or [], many=True).data)

    @extend_schema(responses=DeletionReportSerializer)
    def retrieve(self, request: Request, request_id: str) -> Response:
        return Response(_report(service.get_request(principal_of(request), request_id)))

    @extend_schema(request=None, responses={202: DeletionReportSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, request_id: str) -> Response:
        return Response(_report(service.approve(principal_of(request), request_id)), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=CancelReasonSerializer, responses=DeletionReportSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, request_id: str) -> Response:
        body = CancelReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(_report(service.cancel(principal_of(request), request_id, body.validated_data["reason"])))

    @extend_schema(request=None, responses={202: DeletionReportSerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, request_id: str) -> Response:
        """Requeue the stores that are not verified (after fixing what made them fail); service.retry_stores
        decides who may (403) and in which state (409)."""
        deletion, _ = service.retry_stores(principal_of(request), request_id)
        return Response(_report(deletion), status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses={200: DeletionCertificateSerializer})
    @action(detail=True, methods=["get"])
    def certificate(self, request: Request, request_id: str) -> Response:
        """The signed deletion certificate (compliance staff of the request's tenant; 409 `certificate_not_ready`
        before the purge is confirmed). Verify it offline with `memory-governance verify FILE --key PEM`."""
        return Response(certificates.certificate(principal_of(request), request_id))
