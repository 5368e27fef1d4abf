"""API of tombstones: compliance staff, owners and admins list them (content-free); an owner lifts one, with a
reason (service.lift_tombstone decides who may, and audits it as `tombstone.lifted`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from deletion import service
from deletion.models import Tombstone
from memory_admin.accounts.models import principal_of
from memory_admin.api.serializers import IsoDateTimeField
from memory_admin.lib.pagination import NewestFirstCursorPagination
from memory_admin.memory.errors import Forbidden, NotFound
from memory_admin.shapes.fields import PrincipalNameField

# Tombstone ids are the table's keys; anything else names no tombstone (a 404, not a 500 from the query).
_MAX_ID = 2**63 - 1


class LiftSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, allow_blank=True, default="")


class TombstoneSerializer(serializers.Serializer):
    """What was deleted, when, by which request, and whether it was lifted: ids and times, never content
    (the keyed hashes stay inside the server too)."""

    id = serializers.IntegerField(source="pk")
    kind = serializers.ChoiceField(choices=Tombstone.Kind.choices)
    memory_id = serializers.CharField(allow_blank=True)  # a record tombstone: the deleted record's id
    request_id = serializers.CharField(source="request_public_id", allow_blank=True)  # the request that left it
    created_at = IsoDateTimeField()
    lifted_at = IsoDateTimeField(allow_null=True)
    lifted_by = PrincipalNameField(allow_null=True)
    lift_reason = serializers.CharField(allow_blank=True)


def _tombstone_id(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit() and int(raw) <= _MAX_ID):
        raise NotFound("No such tombstone.")
    return int(raw)


class TombstoneViewSet(viewsets.ViewSet):
    lookup_field = "tombstone_id"
    pagination_class = NewestFirstCursorPagination

    @extend_schema(responses=TombstoneSerializer(many=True))
    def list(self, request: Request) -> Response:
        principal = principal_of(request)
        if not service.may_read(principal):  # the readers of deletion requests read their tombstones
            raise Forbidden("Only compliance staff, owners and admins see tombstones.")
        stones = Tombstone.objects.filter(tenant_id=principal.tenant_pk).select_related("lifted_by")
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(stones, request, view=self)
        return paginator.get_paginated_response(TombstoneSerializer(page or [], many=True).data)

    @extend_schema(request=LiftSerializer, responses=TombstoneSerializer)
    @action(detail=True, methods=["post"])
    def lift(self, request: Request, tombstone_id: str) -> Response:
        """Let the deleted item be written again (owners; with a reason; audited)."""
        body = LiftSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        stone = service.lift_tombstone(
            principal_of(request), _tombstone_id(tombstone_id), body.validated_data["reason"]
        )
        return Response(TombstoneSerializer(stone).data)
