"""API views: parse the request, call one domain function, render. No rules are decided here."""

from __future__ import annotations

from typing import Any, cast

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from memory_admin.accounts.models import principal_of
from memory_admin.accounts.permissions import IsAdminRoleOrComplianceReading
from memory_admin.api import serializers as s
from memory_admin.api.derived import register_read
from memory_admin.api.expiry import ExpiryReasonSerializer, FiledExpirySerializer, expiry_payload
from memory_admin.derived import caches
from memory_admin.lib.pagination import OldestFirstCursorPagination
from memory_admin.lib.throttling import SOURCE_TEST, ThrottleScoped
from memory_admin.memory import actions, expiry, policies, reads, receipts, rechecks
from memory_admin.memory.batch import OUTCOME_STATUS
from memory_admin.memory.errors import NotFound
from memory_admin.memory.filters import Door, RecordFilter
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord
from memory_admin.memory.record_rows import RecordRows
from memory_admin.memory.shapes import json_text_or_null, row_json, row_payload, warm_keys
from memory_admin.shapes.items import assertion_of


def _json_page(paginator: Any, rows: list[Any]) -> HttpResponse:
    """The cursor page `get_paginated_response` answers, as the bytes DRF's JSONRenderer would write for it
    (compact, UTF-8, U+2028/U+2029 escaped), built from the rows' JSON text (tests/api/test_record_rows.py)."""
    text = (
        f'{{"next":{json_text_or_null(paginator.get_next_link())},'
        f'"previous":{json_text_or_null(paginator.get_previous_link())},'
        f'"results":[{",".join(map(row_json, rows))}]}}'
    )
    body = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()
    return HttpResponse(body, content_type=JSONRenderer.media_type)


def _query(serializer_class: type[s.serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class RecordViewSet(viewsets.GenericViewSet):
    serializer_class = s.RecordSerializer
    lookup_field = "memory_id"
    lookup_value_regex = r"[A-Za-z0-9_.:\-]+"

    def get_queryset(self) -> QuerySet[MemoryRecord]:
        return MemoryRecord.objects.for_tenant(principal_of(self.request).tenant_pk).with_public_relations()

    def _record(self, memory_id: str) -> MemoryRecord:
        record = self.get_queryset().filter(memory_id=memory_id).first()
        if record is None:
            raise NotFound(f"No record {memory_id!r}.")
        return record

    @extend_schema(parameters=[s.RecordListQuerySerializer], responses=s.RecordSerializer(many=True))
    def list(self, request: Request) -> HttpResponse:
        # The one record-list filter the dashboard's records page parses too (memory.filters); the serializer
        # above only documents its parameters.
        wanted = RecordFilter.from_params(request.query_params, Door.API)
        # A page is one statement compiled once per process, read as row tuples and written straight to JSON
        # (memory.record_rows, shapes.row_json): the list is the read agents page through most.
        listed = cast(Any, RecordRows(wanted, principal_of(request).tenant_pk))  # duck-typed for the paginator
        rows: list[Any] = self.paginate_queryset(listed) or []
        warm_keys(rows)
        renderer = request.accepted_renderer
        if type(renderer) is JSONRenderer and renderer.get_indent(request.accepted_media_type, {}) is None:
            return _json_page(self.paginator, rows)
        return self.get_paginated_response([row_payload(row) for row in rows])  # the browsable API, indented

    @extend_schema(
        request=s.AssertFactSerializer,
        responses={201: s.AssertResultSerializer, 200: s.AssertResultSerializer, 202: s.AssertResultSerializer},
    )
    def create(self, request: Request) -> Response:
        body = s.AssertFactSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        result = actions.assert_fact(principal_of(request), assertion_of(data))
        answer = s.AssertResultSerializer((self._record(result.record.memory_id), result)).data
        return Response(answer, status=OUTCOME_STATUS[result.outcome])

    @extend_schema(responses=s.RecordSerializer)
    def retrieve(self, request: Request, memory_id: str) -> Response:
        return Response(s.RecordSerializer(self._record(memory_id)).data)

    @extend_schema(responses=s.RecordHistorySerializer)
    @action(detail=True, methods=["get"])
    def history(self, request: Request, memory_id: str) -> Response:
        record = self._record(memory_id)
        chain = reads.history(principal_of(request), record.project.key, record.subject_id, record.predicate)
        return Response(s.RecordHistorySerializer({"memory_id": memory_id, "results": chain}).data)

    @extend_schema(request=s.ReasonSerializer, responses=s.RecordSerializer)
    @action(detail=True, methods=["post"])
    def exclude(self, request: Request, memory_id: str) -> Response:
        body = s.ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actions.exclude_record(principal_of(request), memory_id, body.validated_data["reason"])
        return Response(s.RecordSerializer(self._record(memory_id)).data)

    @extend_schema(request=s.ExpireSerializer, responses=s.RecordSerializer)
    @action(detail=True, methods=["post"])
    def expire(self, request: Request, memory_id: str) -> Response:
        body = s.ExpireSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actions.expire_record(
            principal_of(request),
            memory_id,
            body.validated_data["reason"],
            valid_to=body.validated_data.get("valid_to"),
        )
        return Response(s.RecordSerializer(self._record(memory_id)).data)

    @extend_schema(
        request=ExpiryReasonSerializer,
        responses={201: FiledExpirySerializer, 200: FiledExpirySerializer},
        description="Ask an owner to expire this record (an agent's governed delete). The record stays as it is "
        "until an owner or admin approves (it expires, kept as history) or declines. 201 filed; 200 when a request "
        "for it is already pending (that one is answered).",
    )
    @action(detail=True, methods=["post"], url_path="expiry-requests")
    def expiry_requests(self, request: Request, memory_id: str) -> Response:
        body = ExpiryReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        filed = expiry.request_expiry(principal_of(request), memory_id, body.validated_data["reason"])
        found = expiry.get_request(principal_of(request), filed.request.public_id)
        return Response(
            {**expiry_payload(found), "created": filed.created},
            status=status.HTTP_201_CREATED if filed.created else status.HTTP_200_OK,
        )

    @extend_schema(methods=["GET"], responses=s.RecheckListSerializer)
    @extend_schema(methods=["POST"], request=s.RecheckReportSerializer, responses={201: s.RecheckAttemptSerializer})
    @action(detail=True, methods=["get", "post"])
    def rechecks(self, request: Request, memory_id: str) -> Response:
        """GET: the record's recheck attempts, newest first. POST: report an outcome."""
        record = self._record(memory_id)
        if request.method == "GET":
            attempts = record.rechecks.select_related("record", "reporter", "new_record").order_by("-id")[:200]
            return Response(s.RecheckListSerializer({"memory_id": memory_id, "results": attempts}).data)
        body = s.RecheckReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        attempt = rechecks.report_recheck(
            principal_of(request),
            record,
            outcome=data["outcome"],
            observed_value=data.get("observed_value"),
            source_revision=data["source_revision"],
            source_ref=data["source_ref"],
            error=data["error"],
        )
        return Response(s.RecheckAttemptSerializer(attempt).data, status=status.HTTP_201_CREATED)


class CurrentFactViewSet(viewsets.ViewSet):
    @extend_schema(parameters=[s.FactQuerySerializer], responses=s.FactSerializer)
    def list(self, request: Request) -> Response:
        query = _query(s.FactQuerySerializer, request)
        principal = principal_of(request)
        key = (query["project_id"], query["subject_id"], query["predicate"])
        instants: dict[str, Any] = {"valid_at": query.get("valid_at"), "known_at": query.get("known_at")}
        if query["purpose"] == "answer" and "valid_at" not in query and "known_at" not in query:
            # Answers for "now" are cached until their record changes; reads for acting never are.
            answer = caches.cached_answer(principal.tenant_pk, *key)
            if answer is None:
                view = reads.fact_view(principal, *key)
                answer = s.FactSerializer(view, context={"key": key}).data
                caches.remember_answer(principal.tenant_pk, *key, dict(answer), view.record)
            return Response(_with_context_load(request, query, answer))
        if query["purpose"] == "action":
            # Verify before acting (a write: it may supersede the value), read what stands, and leave a signed
            # receipt of the decision (a refusal's 409 carries its receipt_id too).
            view, receipt = receipts.read_for_action(principal, *key, **instants)
            answer = {**s.FactSerializer(view, context={"key": key}).data, "receipt_id": receipt.public_id}
            return Response(_with_context_load(request, query, answer))
        view = reads.fact_view(principal, *key, purpose=query["purpose"], **instants)
        return Response(_with_context_load(request, query, s.FactSerializer(view, context={"key": key}).data))


def _with_context_load(request: Request, query: dict[str, Any], answer: Any) -> Any:
    """With `session_id`: the answer's record (or a dispute's candidates) registered as a context load, after
    the read (an action the door calls; the read itself only reads). The cached answer never holds it."""
    if "session_id" not in query:
        return answer
    if answer["memory_id"] is not None and answer["revision"] is not None:
        memories = [{"memory_id": answer["memory_id"], "revision": answer["revision"]}]
    else:
        memories = [{"memory_id": c["memory_id"], "revision": c["revision"]} for c in answer["candidates"]]
    return {**answer, "context_load": register_read(request, query, memories)}


class DisputeViewSet(viewsets.GenericViewSet):
    serializer_class = s.DisputeSerializer
    pagination_class = OldestFirstCursorPagination
    lookup_field = "public_id"
    lookup_url_kwarg = "dispute_id"

    def get_queryset(self) -> QuerySet[Dispute]:
        return (
            Dispute.objects.filter(tenant_id=principal_of(self.request).tenant_pk)
            .select_related("project", "resolved_by", "winner")
            .prefetch_related("candidates__issuer")
        )

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "status",
                str,
                enum=["open", "resolved", "all"],
                description="default open",
            )
        ]
    )
    def list(self, request: Request) -> Response:
        wanted = request.query_params.get("status", "open")
        disputes = self.get_queryset()
        if wanted != "all":
            if wanted not in Dispute.Status.values:
                return Response(
                    {
                        "code": "invalid",
                        "detail": "status must be open, resolved or all.",
                    },
                    status=status.HTTP_400_BAD_REQUEST,
                )
            disputes = disputes.filter(status=wanted)
        page = self.paginate_queryset(disputes)
        return self.get_paginated_response(s.DisputeSerializer(page or [], many=True).data)

    @extend_schema(responses=s.DisputeSerializer)
    def retrieve(self, request: Request, dispute_id: str) -> Response:
        dispute = self.get_queryset().filter(public_id=dispute_id).first()
        if dispute is None:
            raise NotFound(f"No dispute {dispute_id!r}.")
        return Response(s.DisputeSerializer(dispute).data)

    @extend_schema(request=s.ResolveDisputeSerializer, responses=s.DisputeSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, dispute_id: str) -> Response:
        body = s.ResolveDisputeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actions.resolve_dispute(
            principal_of(request),
            dispute_id,
            winner=body.validated_data.get("winner") or None,
            exclude_all=body.validated_data["exclude_all"],
            reason=body.validated_data["reason"],
        )
        return self.retrieve(request, dispute_id)


@extend_schema_view(
    create=extend_schema(request=s.FieldPolicyInSerializer),
    update=extend_schema(request=s.FieldPolicyInSerializer),
    partial_update=extend_schema(request=s.FieldPolicyInSerializer),
)
class FieldPolicyViewSet(
    ThrottleScoped,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = s.FieldPolicySerializer
    permission_classes = [IsAdminRoleOrComplianceReading]
    pagination_class = OldestFirstCursorPagination

    def get_queryset(self) -> QuerySet[FieldPolicy]:
        return FieldPolicy.objects.filter(tenant_id=principal_of(self.request).tenant_pk).select_related("project")

    def _data(self, serializer: s.FieldPolicySerializer) -> dict[str, Any]:
        data = dict(serializer.validated_data)
        if "project" in data:
            data["project_id"] = (data.pop("project") or {}).get("key")
        return data

    def perform_create(self, serializer: s.FieldPolicySerializer) -> None:  # type: ignore[override]
        serializer.instance = policies.save_field_policy(principal_of(self.request), self._data(serializer))

    def perform_update(self, serializer: s.FieldPolicySerializer) -> None:  # type: ignore[override]
        serializer.instance = policies.save_field_policy(
            principal_of(self.request),
            self._data(serializer),
            instance=serializer.instance,
        )

    def perform_destroy(self, instance: FieldPolicy) -> None:
        policies.delete_field_policy(principal_of(self.request), instance)

    @extend_schema(request=s.SourceTestSerializer, responses=s.SourceTestResultSerializer)
    @action(detail=True, methods=["post"], throttle_scope=SOURCE_TEST)  # it makes the server fetch: own budget
    def test(self, request: Request, pk: str) -> Response:
        """Fetch one subject from the canonical source now and say what a recheck would conclude."""
        body = s.SourceTestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = rechecks.test_source(
            self.get_object(), body.validated_data["subject_id"], body.validated_data.get("project_id")
        )
        return Response(s.SourceTestResultSerializer(result).data)
