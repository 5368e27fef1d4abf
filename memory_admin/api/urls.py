"""The one API router, mounted at /api/v1/: every app's viewsets are registered here, and no app routes
another. The order is the URL order (a more specific prefix first where two could match)."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from memory_admin.api import derived, tokens, trust
from memory_admin.api import views as memory
from memory_admin.api.batch import BatchViewSet
from memory_admin.api.deletion import DeletionRequestViewSet
from memory_admin.api.expiry import ExpiryRequestViewSet
from memory_admin.api.receipts import ReceiptViewSet
from memory_admin.api.tombstones import TombstoneViewSet
from memory_admin.lib.api_errors import register_shape
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.shapes import record_payload

# A 409 `revision_conflict` carries the current record: shown in the record format.
register_shape(MemoryRecord, record_payload)

router = SimpleRouter()
# Before "records": `records/batch/` would otherwise read as a record's id.
router.register("records/batch", BatchViewSet, basename="record-batch")
router.register("records", memory.RecordViewSet, basename="record")
router.register("facts/current", memory.CurrentFactViewSet, basename="fact-current")
router.register("receipts", ReceiptViewSet, basename="receipt")
router.register("disputes", memory.DisputeViewSet, basename="dispute")
router.register("expiry-requests", ExpiryRequestViewSet, basename="expiry-request")
router.register("field-policies", memory.FieldPolicyViewSet, basename="field-policy")
router.register("events", derived.EventViewSet, basename="event")
router.register("summaries", derived.SummaryViewSet, basename="summary")
router.register("scheduled-actions", derived.ScheduledActionViewSet, basename="scheduled-action")
router.register("context-loads", derived.ContextLoadViewSet, basename="context-load")
router.register("search", derived.SearchViewSet, basename="search")
router.register("deletion-requests", DeletionRequestViewSet, basename="deletion-request")
router.register("tombstones", TombstoneViewSet, basename="tombstone")
router.register("tokens", tokens.TokenViewSet, basename="token")
router.register(
    r"agents/(?P<agent_id>[A-Za-z0-9_.@\-]+)/invalidations", derived.InvalidationViewSet, basename="invalidation"
)

urlpatterns = [
    path("trust/keys/", trust.TrustKeysView.as_view(), name="trust-keys"),
    path("audit/verify/", trust.AuditChainView.as_view(), name="audit-verify"),
    *router.urls,
]
