"""`GET /api/v1/receipts/{id}/`: a decision receipt, signed (memory.receipts; docs/api.md, "Decision receipts").

Owners and compliance staff read any receipt of their tenant; an agent (or anyone else) only the receipts of its
own reads. Any other id answers 404, whether it is another tenant's, another reader's or unknown."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from memory_admin.accounts.models import principal_of
from memory_admin.memory import receipts


class ReceiptSerializer(serializers.Serializer):
    """A decision receipt. The signature covers every member but `signature` and `disclosure` (the canonical form
    of docs/security.md, "Signed documents"); `disclosure` holds the value served and the nonce of
    `value_commitment`, null once a deletion erased it."""

    kind = serializers.CharField()
    format = serializers.IntegerField()
    receipt_id = serializers.CharField()
    tenant = serializers.CharField()
    sequence = serializers.IntegerField()
    prev_hash = serializers.CharField(allow_blank=True)
    reader = serializers.DictField()
    fact = serializers.DictField()
    purpose = serializers.CharField()
    decision = serializers.ChoiceField(choices=[receipts.SERVED, receipts.REFUSED])
    served = serializers.DictField(allow_null=True)
    refusal = serializers.DictField(allow_null=True)
    value_commitment = serializers.CharField(allow_null=True)
    freshness = serializers.DictField()
    policy = serializers.DictField(allow_null=True)
    verification = serializers.DictField()
    at = serializers.CharField()
    algorithm = serializers.CharField()
    key_id = serializers.CharField()
    signature = serializers.CharField()
    disclosure = serializers.DictField(allow_null=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return receipts.as_document(instance)


class ReceiptViewSet(viewsets.ViewSet):
    lookup_field = "receipt_id"
    lookup_value_regex = r"[A-Za-z0-9_\-]{1,64}"

    @extend_schema(responses=ReceiptSerializer)
    def retrieve(self, request: Request, receipt_id: str) -> Response:
        return Response(ReceiptSerializer(receipts.get_receipt(principal_of(request), receipt_id)).data)
