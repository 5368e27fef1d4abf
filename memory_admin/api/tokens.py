"""API of API tokens (admins of the tenant): list them (never a secret: the prefix tells them apart), issue one to
an agent (the token is in that one answer only) and revoke one. memory.tokens decides who may and audits."""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from memory_admin.accounts.models import ApiToken, principal_of
from memory_admin.api.serializers import AwareDateTimeField, IsoDateTimeField
from memory_admin.lib.pagination import NewestFirstCursorPagination
from memory_admin.lib.schema import CONTROL_FREE_NON_BLANK_TEXT, CONTROL_FREE_TEXT
from memory_admin.memory import tokens
from memory_admin.shapes.fields import OmitWhenAbsentMixin, PrincipalNameField


class IssueTokenSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"name": {"pattern": CONTROL_FREE_NON_BLANK_TEXT}}  # memory.tokens

    principal = serializers.CharField(max_length=150, help_text="the agent's name in this tenant")
    name = serializers.CharField(max_length=tokens.NAME_MAX_LENGTH, help_text="what or where the token is used")
    expires_at = AwareDateTimeField(required=False, allow_null=True, help_text="in the future; null: never")


class RevokeTokenSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"reason": {"pattern": CONTROL_FREE_TEXT}}  # memory.tokens

    reason = serializers.CharField(max_length=tokens.REASON_MAX_LENGTH, allow_blank=True, default="")


class TokenSerializer(serializers.Serializer):
    """A token as admins see it: never its secret or hash."""

    id = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    principal = PrincipalNameField()
    prefix = serializers.CharField(help_text="the token's first characters, to tell tokens apart (not a secret)")
    state = serializers.ChoiceField(choices=ApiToken.State.choices)
    created_at = IsoDateTimeField()
    created_by = PrincipalNameField(allow_null=True, help_text="null: issued by a command")
    expires_at = IsoDateTimeField(allow_null=True)
    last_used_at = IsoDateTimeField(allow_null=True, help_text="exact to within a minute")
    revoked_at = IsoDateTimeField(allow_null=True)
    revoked_by = PrincipalNameField(allow_null=True)
    revoke_reason = serializers.CharField(allow_blank=True)


class SecretField(OmitWhenAbsentMixin, serializers.CharField):
    """A token's secret: no stored row has it (IssuedTokenSerializer adds it beside the row)."""


class IssuedTokenSerializer(TokenSerializer):
    """A token just issued: the listing's fields plus the secret, which no other answer ever carries."""

    token = SecretField(help_text="the secret: shown in this answer only, never again")

    def to_representation(self, instance: tuple[ApiToken, str]) -> dict[str, Any]:
        row, raw = instance  # the secret travels beside the row: memory.tokens never stores it
        return {**super().to_representation(row), "token": raw}


class TokenViewSet(viewsets.ViewSet):
    lookup_field = "token_id"
    pagination_class = NewestFirstCursorPagination

    @extend_schema(responses=TokenSerializer(many=True))
    def list(self, request: Request) -> Response:
        rows = tokens.tokens_of(principal_of(request))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(TokenSerializer(page or [], many=True).data)

    @extend_schema(request=IssueTokenSerializer, responses={201: IssuedTokenSerializer})
    def create(self, request: Request) -> Response:
        """Issue a token to one of the tenant's agents; the answer is the only place the token appears."""
        actor = principal_of(request)
        tokens.require_token_admin(actor)  # refused before the body is read
        body = IssueTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        issued = tokens.issue_for_agent(actor, data["principal"], name=data["name"], expires_at=data.get("expires_at"))
        response = Response(IssuedTokenSerializer(issued).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"  # the secret must not stay in a cache on the way
        return response

    @extend_schema(request=RevokeTokenSerializer, responses=TokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, token_id: str) -> Response:
        """Revoke a token: its next request answers 401 `authentication_failed` ("Token revoked.")."""
        actor = principal_of(request)
        token = tokens.token_of(actor, token_id)  # 403 for non-admins, 404 for another tenant's, before the body
        body = RevokeTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tokens.revoke(token, actor=actor, reason=body.validated_data["reason"])
        return Response(TokenSerializer(token).data)
