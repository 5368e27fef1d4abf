from __future__ import annotations

from rest_framework.routers import SimpleRouter

from deletion.api import DeletionRequestViewSet
from memory_admin.derived import api as derived
from memory_admin.memory.api import views

router = SimpleRouter()
router.register("records", views.RecordViewSet, basename="record")
router.register("facts/current", views.CurrentFactViewSet, basename="fact-current")
router.register("disputes", views.DisputeViewSet, basename="dispute")
router.register("field-policies", views.FieldPolicyViewSet, basename="field-policy")
router.register("events", derived.EventViewSet, basename="event")
router.register("summaries", derived.SummaryViewSet, basename="summary")
router.register("scheduled-actions", derived.ScheduledActionViewSet, basename="scheduled-action")
router.register("context-loads", derived.ContextLoadViewSet, basename="context-load")
router.register("search", derived.SearchViewSet, basename="search")
router.register("deletion-requests", DeletionRequestViewSet, basename="deletion-request")
router.register(
    r"agents/(?P<agent_id>[A-Za-z0-9_.@\-]+)/invalidations", derived.InvalidationViewSet, basename="invalidation"
)

urlpatterns = router.urls
