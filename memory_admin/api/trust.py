"""What a third party needs to check this deployment (docs/security.md, "Audit chain" and "Signing keys"):

- `GET /api/v1/trust/keys/`: the public keys that verify its signed documents (audit checkpoints, deletion
  certificates, decision receipts), old keys included after a rotation. Public: a public key is no secret, and an
  auditor or an offline verifier may hold no account here; throttled per client address like any request.
- `GET /api/v1/audit/verify/`: the caller's tenant's audit chain walked now: intact, or the first event whose
  link, commitment or signed checkpoint does not hold; with the latest signed checkpoint, which an auditor may
  keep as an outside copy. For the tenant's owners and compliance staff.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memory_admin.accounts.models import principal_of
from memory_admin.accounts.permissions import HasRole
from memory_admin.lib import signing
from memory_admin.lib.throttling import SOURCE_TEST
from memory_admin.memory import audit_chain
from memory_admin.memory.models import AuditCheckpoint


class VerifyingKeySerializer(serializers.Serializer):
    key_id = serializers.CharField(help_text="`ed25519:` and the first 16 hex digits of the key's SHA-256")
    algorithm = serializers.ChoiceField(choices=["ed25519"])
    public_key_pem = serializers.CharField(help_text="SubjectPublicKeyInfo, PEM")
    valid_from = serializers.CharField(allow_null=True, help_text="ISO 8601; null: not recorded")
    valid_to = serializers.CharField(allow_null=True, help_text="ISO 8601; null: the current key")


class VerifyingKeysSerializer(serializers.Serializer):
    keys = VerifyingKeySerializer(many=True, help_text="the current key first, then retired ones")


class TrustKeysView(APIView):
    """The verifying keys of this deployment's signatures."""

    authentication_classes: list[Any] = []  # public: a token, valid or not, changes nothing
    permission_classes = [AllowAny]

    @extend_schema(responses=VerifyingKeysSerializer, auth=[])
    def get(self, request: Request) -> Response:
        return Response({"keys": [key.as_dict() for key in signing.verifying_keys()]})


class BrokenLinkSerializer(serializers.Serializer):
    event_id = serializers.IntegerField(allow_null=True, help_text="the audit event; null: the chain's end")
    at = serializers.CharField(allow_null=True, help_text="the event's time, ISO 8601")
    action = serializers.CharField(allow_blank=True)
    problem = serializers.CharField(help_text="what does not hold, in words")


class CheckpointSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=[audit_chain.CHECKPOINT_TYPE])
    tenant = serializers.IntegerField()
    event_id = serializers.IntegerField()
    event_hash = serializers.CharField()
    events = serializers.IntegerField(help_text="how many events the chain held up to event_id")
    at = serializers.CharField()
    algorithm = serializers.CharField()
    key_id = serializers.CharField()
    signature = serializers.CharField(help_text="Ed25519 over the canonical form, base64")


class ChainStatusSerializer(serializers.Serializer):
    intact = serializers.BooleanField()
    events = serializers.IntegerField(help_text="events checked (up to the first broken one)")
    checkpoints = serializers.IntegerField(help_text="signed checkpoints of the chain")
    first_broken = BrokenLinkSerializer(allow_null=True)
    checked_at = serializers.CharField()
    latest_checkpoint = CheckpointSerializer(allow_null=True, help_text="verifies against /trust/keys/")


class IsOwnerOrCompliance(HasRole):
    roles = ("owner", "compliance")


class AuditChainView(APIView):
    """The caller's tenant's audit chain, verified now."""

    permission_classes = [IsOwnerOrCompliance]
    throttle_scope = SOURCE_TEST  # it reads the whole chain: the expensive requests' budget

    @extend_schema(responses=ChainStatusSerializer)
    def get(self, request: Request) -> Response:
        tenant_id = principal_of(request).tenant_id
        assert tenant_id is not None  # IsTenantMember
        report = audit_chain.verify_tenant(tenant_id)
        return Response({**report.as_dict(), "latest_checkpoint": _latest_checkpoint(tenant_id)})


def _latest_checkpoint(tenant_id: int) -> dict[str, Any] | None:
    point = AuditCheckpoint.objects.filter(tenant_id=tenant_id).order_by("-event_id", "-id").first()
    if point is None:
        return None
    document = audit_chain.checkpoint_document(
        tenant_id=tenant_id, event_id=point.event_id, event_hash=point.event_hash, events=point.events, at=point.at
    )
    return {**document, "algorithm": point.algorithm, "key_id": point.key_id, "signature": point.signature}
