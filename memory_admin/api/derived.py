"""API of the derived stores: events, summaries, scheduled actions, loaded contexts, invalidations."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from deletion import tombstones
from memory_admin.accounts.models import principal_of
from memory_admin.api.serializers import (
    SESSION_ID_MAX_LENGTH,
    AwareDateTimeField,
    ContextLoadRefSerializer,
    ContextOnReadSerializer,
    DerivedFromSerializer,
    IdentifierField,
    IsoDateTimeField,
)
from memory_admin.derived import lineage, search
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import ContextLoad, Event, EventSubject, ScheduledAction, Summary
from memory_admin.lib.throttling import SEARCH
from memory_admin.memory.errors import Tombstoned
from memory_admin.shapes.derived import InvalidationOutSerializer, SearchHitSerializer, embedder_payload
from memory_admin.shapes.fields import IsSetField, PrincipalNameField


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def _bases(items: list[dict[str, Any]]) -> list[BaseRef]:
    return [BaseRef(item["memory_id"], item["revision"]) for item in items]


# --- Events (the log store) -------------------------------------------------------------------


class EventSerializer(serializers.Serializer):
    project_id = IdentifierField("project_id")
    session_id = serializers.CharField(max_length=200)
    actor = serializers.CharField(max_length=200)
    text = serializers.CharField(max_length=20000)
    occurred_at = AwareDateTimeField()
    subject_ids = serializers.ListField(child=IdentifierField("subject_id"), max_length=100, default=list)


class EventListQuerySerializer(serializers.Serializer):
    project_id = IdentifierField("project_id", required=False)
    session_id = serializers.CharField(required=False, max_length=200)
    subject_id = IdentifierField("subject_id", required=False)


class EventTextField(serializers.CharField):
    """An event's text; blank once the event is redacted."""

    def get_attribute(self, instance: Event) -> str:
        return "" if instance.redacted_at else instance.text


class EventOutSerializer(serializers.Serializer):
    """One event of the log store; a redacted event shows no text."""

    id = serializers.CharField(source="public_id")
    project_id = serializers.CharField(source="project.key")
    session_id = serializers.CharField()
    actor = serializers.CharField()
    text = EventTextField(allow_blank=True, source="*")
    redacted = IsSetField(source="redacted_at")
    occurred_at = IsoDateTimeField()
    subject_ids = serializers.ListField(child=serializers.CharField())
    recorded_at = IsoDateTimeField()


class EventViewSet(viewsets.GenericViewSet):
    serializer_class = EventSerializer

    def get_queryset(self) -> QuerySet[Event]:
        return Event.objects.filter(tenant_id=principal_of(self.request).tenant_pk).visible().select_related("project")

    @extend_schema(request=EventSerializer, responses={201: EventOutSerializer})
    def create(self, request: Request) -> Response:
        body = EventSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        event = lineage.log_event(principal_of(request), **body.validated_data)
        return Response(EventOutSerializer(event).data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[EventListQuerySerializer], responses=EventOutSerializer(many=True))
    def list(self, request: Request) -> Response:
        # Ids in the query string follow the same rule as in bodies (NFKC-normalised; 400 otherwise).
        query = EventListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        wanted = query.validated_data
        events = self.get_queryset()
        for param, lookup in (("project_id", "project__key"), ("session_id", "session_id")):
            if wanted.get(param):
                events = events.filter(**{lookup: wanted[param]})
        if wanted.get("subject_id"):
            # Through the EventSubject index (JSON containment is PostgreSQL-only, and unindexed there).
            tagged = EventSubject.objects.filter(
                tenant_id=principal_of(request).tenant_pk, subject_id=wanted["subject_id"]
            )
            events = events.filter(pk__in=tagged.values("event_id"))
        page = self.paginate_queryset(events)
        return self.get_paginated_response(EventOutSerializer(page or [], many=True).data)


# --- Summaries --------------------------------------------------------------------------------


class SummaryInSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"derived_from": {"minItems": 1}}  # the domain needs a base
    project_id = IdentifierField("project_id")
    text = serializers.CharField(max_length=50000)
    derived_from = DerivedFromSerializer(many=True)
    kind = serializers.CharField(max_length=50, default="text")


class SummaryOutSerializer(serializers.Serializer):
    """One summary."""

    id = serializers.CharField(source="public_id")
    project_id = serializers.CharField(source="project.key")
    kind = serializers.CharField()
    text = serializers.CharField(allow_blank=True)
    derived_from = serializers.JSONField()
    status = serializers.ChoiceField(choices=Summary.Status.choices)
    status_reason = serializers.CharField(allow_blank=True)
    status_changed_at = IsoDateTimeField(allow_null=True)
    created_at = IsoDateTimeField()
    created_by = PrincipalNameField()
    replaces = serializers.CharField(source="replaces.public_id", allow_null=True)


class SummaryViewSet(viewsets.ViewSet):
    lookup_field = "summary_id"

    @extend_schema(request=SummaryInSerializer, responses={201: SummaryOutSerializer})
    def create(self, request: Request) -> Response:
        body = SummaryInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        summary = lineage.create_summary(
            principal_of(request),
            project_id=data["project_id"],
            text=data["text"],
            kind=data["kind"],
            bases=_bases(data["derived_from"]),
        )
        return Response(SummaryOutSerializer(summary).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=SummaryOutSerializer)
    def retrieve(self, request: Request, summary_id: str) -> Response:
        return Response(SummaryOutSerializer(lineage.get_summary(principal_of(request), summary_id)).data)


# --- Scheduled actions ------------------------------------------------------------------------


class ActionInSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"derived_from": {"minItems": 1}}  # what the action was built on
    project_id = IdentifierField("project_id")
    kind = serializers.CharField(max_length=100)
    payload = serializers.JSONField(default=dict)
    due_at = AwareDateTimeField()
    derived_from = DerivedFromSerializer(many=True)


class ConfirmSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"derived_from": {"minItems": 1}}
    derived_from = DerivedFromSerializer(many=True)
    due_at = AwareDateTimeField(required=False)
    payload = serializers.JSONField(required=False)


class ActionOutSerializer(serializers.Serializer):
    """One scheduled action."""

    id = serializers.CharField(source="public_id")
    project_id = serializers.CharField(source="project.key")
    kind = serializers.CharField()
    payload = serializers.JSONField()
    due_at = IsoDateTimeField()
    derived_from = serializers.JSONField()
    status = serializers.ChoiceField(choices=ScheduledAction.Status.choices)
    status_reason = serializers.CharField(allow_blank=True)
    status_changed_at = IsoDateTimeField(allow_null=True)
    agent_id = serializers.CharField(source="agent.name")
    created_at = IsoDateTimeField()


class ScheduledActionViewSet(viewsets.ViewSet):
    lookup_field = "action_id"

    @extend_schema(request=ActionInSerializer, responses={201: ActionOutSerializer})
    def create(self, request: Request) -> Response:
        body = ActionInSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        item = lineage.schedule_action(
            principal_of(request),
            project_id=data["project_id"],
            kind=data["kind"],
            payload=data["payload"],
            due_at=data["due_at"],
            bases=_bases(data["derived_from"]),
        )
        return Response(ActionOutSerializer(item).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=ActionOutSerializer)
    def retrieve(self, request: Request, action_id: str) -> Response:
        item = lineage.get_action(principal_of(request), action_id)
        # Planned from memory a deletion covers: its payload carries the deleted values. Refused from the
        # acceptance on (stage 2, read from the tombstones), before the purge blanks it; like a summary.
        bases = [b.get("memory_id") or "" for b in item.derived_from if isinstance(b, dict)]
        if tombstones.tombstoned_memory_ids(item.tenant_id, bases):
            raise Tombstoned("This action was planned from deleted memory; it is withdrawn.")
        return Response(ActionOutSerializer(item).data)

    @extend_schema(request=ConfirmSerializer, responses=ActionOutSerializer)
    @action(detail=True, methods=["post"])
    def confirm(self, request: Request, action_id: str) -> Response:
        """Re-confirm a suspended action against the current values."""
        body = ConfirmSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        item = lineage.confirm_action(
            principal_of(request),
            action_id,
            bases=_bases(data["derived_from"]),
            due_at=data.get("due_at"),
            payload=data.get("payload"),
        )
        return Response(ActionOutSerializer(item).data)


# --- Loaded contexts and their invalidation notices --------------------------------------------


class ContextLoadSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"memories": {"minItems": 1}}  # the domain refuses an empty load
    agent_id = serializers.CharField(max_length=150, required=False)
    session_id = serializers.CharField(max_length=SESSION_ID_MAX_LENGTH)
    project_id = IdentifierField("project_id", required=False)
    memories = DerivedFromSerializer(many=True)
    expires_at = AwareDateTimeField()


class LoadedMemorySerializer(serializers.Serializer):
    """One memory of a context load: its id, at the revision loaded."""

    memory_id = serializers.CharField(source="record.memory_id")
    revision = serializers.IntegerField()


class OpenInvalidationsField(serializers.ListField):
    """The ids of a context load's notices not acknowledged yet (from its prefetched invalidations)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(), **kwargs)

    def get_attribute(self, instance: ContextLoad) -> list[str]:
        return [n.public_id for n in instance.invalidations.all() if n.acknowledged_at is None]


class ContextLoadOutSerializer(serializers.Serializer):
    """One registered context load."""

    id = serializers.CharField(source="public_id")
    agent_id = serializers.CharField(source="agent.name")
    session_id = serializers.CharField()
    loaded_at = IsoDateTimeField()
    expires_at = IsoDateTimeField()
    memories = LoadedMemorySerializer(source="items.all", many=True)
    open_invalidations = OpenInvalidationsField(source="*")


@extend_schema_serializer(many=False)  # one object, though served by a `list` route
class InvalidationListSerializer(serializers.Serializer):
    """Answer of `GET /agents/{agent_id}/invalidations/`: at most 500 notices, oldest first."""

    agent_id = serializers.CharField()
    results = InvalidationOutSerializer(many=True)


class ContextLoadViewSet(viewsets.ViewSet):
    @extend_schema(request=ContextLoadSerializer, responses={201: ContextLoadOutSerializer})
    def create(self, request: Request) -> Response:
        body = ContextLoadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        principal = principal_of(request)
        if data.get("agent_id") and data["agent_id"] != principal.name:
            return Response(
                {"code": "forbidden", "detail": "An agent registers only its own loaded contexts."},
                status=status.HTTP_403_FORBIDDEN,
            )
        load = lineage.register_context_load(
            principal,
            session_id=data["session_id"],
            bases=_bases(data["memories"]),
            expires_at=data["expires_at"],
            project_id=data.get("project_id"),
        )
        load = ContextLoad.objects.prefetch_related("items__record", "invalidations").get(pk=load.pk)
        return Response(ContextLoadOutSerializer(load).data, status=status.HTTP_201_CREATED)


READ_CONTEXT_TTL = timedelta(hours=12)  # a load registered by a read, when it names no context_expires_at


def register_read(request: Request, query: dict[str, Any], memories: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A read with `session_id`: register what it returned as usable as one context load of the caller,
    through the same domain function as `POST /context-loads/`. What it registered, or None (no session_id,
    or nothing usable was returned: a refused or held-back item is never registered)."""
    if not query.get("session_id") or not memories:
        return None
    load = lineage.register_context_load(
        principal_of(request),
        session_id=query["session_id"],
        bases=_bases(memories),
        expires_at=query.get("context_expires_at") or timezone.now() + READ_CONTEXT_TTL,
        project_id=query.get("project_id"),
    )
    return {
        "id": load.public_id,
        "agent_id": load.agent.name,
        "session_id": load.session_id,
        "expires_at": _iso(load.expires_at),
    }


class InvalidationViewSet(viewsets.ViewSet):
    """`/agents/{agent_id}/invalidations/`: the notices an agent must apply, and their acknowledgement."""

    lookup_field = "invalidation_id"

    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=["open", "all"], description="default open")],
        responses=InvalidationListSerializer,
    )
    def list(self, request: Request, agent_id: str) -> Response:
        open_only = request.query_params.get("status", "open") != "all"
        notices = lineage.invalidations_for(principal_of(request), agent_id, open_only=open_only).order_by("id")[:500]
        return Response(InvalidationListSerializer({"agent_id": agent_id, "results": notices}).data)

    @extend_schema(request=None, responses=InvalidationOutSerializer)
    @action(detail=True, methods=["post"])
    def ack(self, request: Request, agent_id: str, invalidation_id: str) -> Response:
        notice = lineage.acknowledge(principal_of(request), agent_id, invalidation_id)
        return Response(InvalidationOutSerializer(notice).data)


# --- Retrieval --------------------------------------------------------------------------------


class SearchQuerySerializer(ContextOnReadSerializer):
    project_id = IdentifierField("project_id", required=False)
    # Filters, pushed into the index query and re-checked on the records (docs/retrieval.md).
    subject_id = IdentifierField("subject_id", required=False)
    predicate = IdentifierField("predicate", required=False)
    q = serializers.CharField(max_length=2000)
    k = serializers.IntegerField(min_value=1, max_value=100, default=10)
    include = serializers.ChoiceField(choices=["usable", "all"], default="usable")


class EmbedderSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="the embedder that ranked the hits (docs/retrieval.md)")
    fallback = serializers.BooleanField(
        help_text="true when the configured model could not load and the lexical hashing embedder ranked them"
    )
    detail = serializers.CharField(allow_null=True)


@extend_schema_serializer(many=False)  # one object, though served by a `list` route
class SearchResultSerializer(serializers.Serializer):
    """Answer of `GET /search/`: the top-k hits, best first, and the embedder that ranked them."""

    results = SearchHitSerializer(many=True)
    embedder = EmbedderSerializer()
    # Set by `GET /search/?session_id=...`: the context load of the usable hits (null when none).
    context_load = ContextLoadRefSerializer(allow_null=True, required=False)


class SearchViewSet(viewsets.ViewSet):
    throttle_scope = SEARCH  # vector search costs more than a read: its own budget

    @extend_schema(parameters=[SearchQuerySerializer], responses=SearchResultSerializer)
    def list(self, request: Request) -> Response:
        """Top-k retrieval as an agent sees it; only usable records unless include=all."""
        query = SearchQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        result = search.search(
            principal_of(request),
            project_id=data.get("project_id"),
            q=data["q"],
            k=data["k"],
            include_all=data["include"] == "all",
            subject_id=data.get("subject_id"),
            predicate=data.get("predicate"),
        )
        answer: dict[str, Any] = {
            "results": SearchHitSerializer(result.results, many=True).data,
            "embedder": embedder_payload(),
        }
        if "session_id" in data:
            usable = [
                {"memory_id": h.record.memory_id, "revision": h.record.revision} for h in result.results if h.usable
            ]
            answer["context_load"] = register_read(request, data, usable)
        return Response(answer)
