from __future__ import annotations

from rest_framework.routers import SimpleRouter

from memory_admin.memory.api import views

router = SimpleRouter()
router.register("records", views.RecordViewSet, basename="record")
router.register("facts/current", views.CurrentFactViewSet, basename="fact-current")
router.register("disputes", views.DisputeViewSet, basename="dispute")
router.register("field-policies", views.FieldPolicyViewSet, basename="field-policy")

urlpatterns = router.urls
