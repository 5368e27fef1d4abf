"""Runs of the conformance suite started from the dashboard: progress while running, the scores after."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from memory_admin.accounts.models import Tenant


class ConformanceRunQuerySet(models.QuerySet["ConformanceRun"]):
    def for_tenant(self, tenant_id: int | None) -> ConformanceRunQuerySet:
        return self.filter(tenant_id=tenant_id)


class ConformanceRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        PASSED = "passed", "Every count right"
        FAILED = "failed", "This system fails a count"
        ERROR = "error", "Could not run"

    FINISHED = (Status.PASSED, Status.FAILED, Status.ERROR)

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    targets = models.JSONField(default=list)
    variants = models.PositiveSmallIntegerField(default=4)
    seed = models.IntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    current = models.CharField(max_length=200, blank=True)
    # The scores (runner.run_suite's result without the per-probe records): counts per target, cases.
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ConformanceRunQuerySet.as_manager()

    class Meta:
        indexes = [
            # The page: a tenant's runs, newest first.
            models.Index(fields=["tenant", "-id"], name="conformance_run_newest"),
        ]

    def __str__(self) -> str:
        return f"conformance run {self.pk} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0
