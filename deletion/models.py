"""Deletion requests, the content-free tombstones they leave, per-store progress, and the backup
catalogue that gives the last stage: until when backups taken earlier still hold the data."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from memory_admin.accounts.models import Tenant
from memory_admin.memory.models import Project, PublicIdModel


class DeletionRequest(PublicIdModel):
    public_prefix = "del"

    class State(models.TextChoices):
        AWAITING_APPROVAL = "awaiting_approval", "Awaiting a second approval"
        ACCEPTED = "accepted", "Accepted"
        PURGING = "purging", "Purging"
        PURGE_CONFIRMED = "purge_confirmed", "Purge confirmed"
        CANCELLED = "cancelled", "Cancelled"

    class ScopeKind(models.TextChoices):
        SUBJECT = "subject_id", "A subject"
        MEMORY_IDS = "memory_ids", "Memory ids"
        PREDICATE = "predicate", "A whole predicate"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="deletion_requests")
    # The scope as filed. A subject id or predicate is an identifier, not memory content; it stays so that
    # compliance staff can say what was deleted. Values and texts are never kept here.
    scope_kind = models.CharField(max_length=12, choices=ScopeKind.choices)
    scope_value = models.JSONField()
    reason = models.TextField()
    # The scope's values were cut out of the reason as filed (deletion.reasons): the reason kept is the redacted one.
    reason_redacted = models.BooleanField(default=False)
    due_by = models.DateField(null=True, blank=True)
    state = models.CharField(max_length=20, choices=State.choices)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The four stages, each set once, never early.
    accepted_at = models.DateTimeField(default=timezone.now)
    removed_from_reads_at = models.DateTimeField(null=True, blank=True)
    purge_confirmed_at = models.DateTimeField(null=True, blank=True)
    backups_expire_at = models.DateTimeField(null=True, blank=True)
    backups_note = models.TextField(blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-id"], name="deletion_tenant_newest")]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.state})"


class StoreProgress(models.Model):
    """One store's part of a request: found, hidden, purged, verified, with the evidence."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        FAILED = "failed", "Failed (will retry)"
        WAITING = "waiting", "Waiting (holders must acknowledge)"
        VERIFIED = "verified", "Verified"

    request = models.ForeignKey(DeletionRequest, on_delete=models.CASCADE, related_name="stores")
    store = models.CharField(max_length=20)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    # What the store holds for this request, found at acceptance (ids and keys, never content).
    targets = models.JSONField(default=dict)
    found = models.PositiveIntegerField(default=0)
    hidden = models.PositiveIntegerField(default=0)
    purged = models.PositiveIntegerField(default=0)
    remaining = models.PositiveIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    evidence = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["request", "store"], name="store_progress_once")]
        indexes = [
            # The reconciler: rows whose lease ran out, or that failed and wait for a retry.
            models.Index(fields=["state", "lease_until"], condition=~Q(state="verified"), name="store_progress_open"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id}/{self.store} {self.state}"


class Tombstone(models.Model):
    """A content-free mark of what was deleted: keyed hashes and opaque ids, never a value or text.

    It hides the scope from every read path and refuses writes that would bring the content back.
    """

    class Kind(models.TextChoices):
        RECORD = "record", "A memory record"
        SUBJECT = "subject", "A subject"
        PREDICATE = "predicate", "A predicate"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    # Null for a tombstone replayed from the ledger after a restore from a backup older than its request.
    request = models.ForeignKey(
        DeletionRequest, on_delete=models.PROTECT, null=True, blank=True, related_name="tombstones"
    )
    request_public_id = models.CharField(max_length=64, default="")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    memory_id = models.CharField(max_length=64, blank=True, db_index=True)
    # Keyed hashes (HMAC with the deployment's secret) of the fact key, scope, value and source.
    scope_hash = models.CharField(max_length=64, db_index=True)
    value_hash = models.CharField(max_length=64, blank=True)
    source_hash = models.CharField(max_length=64, blank=True)
    # A subject deletion's records only: a keyed hash of the subject and the value in its canonical spelling
    # (`tombstones.subject_value_digest`), so the value stays out of the subject under any predicate. Null for
    # the rest (and for values that carry no content: booleans and null).
    subject_value_hash = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+", db_index=False
    )  # see Meta.indexes
    lift_reason = models.TextField(blank=True)

    class Meta:
        indexes = [
            # The principal's PROTECT check: only lifted tombstones name one, so the index holds those alone and
            # a deletion's 10,000 tombstones (written with no lifter) add no entry to it.
            models.Index(fields=["lifted_by"], condition=Q(lifted_by__isnull=False), name="tombstone_lifted_by"),
            # Every write about a subject asks whether its value was deleted from the subject; only a subject
            # deletion's record tombstones hold a hash (an equality on it implies NOT NULL, so the planner uses
            # this partial index for a bound parameter too).
            models.Index(
                fields=["subject_value_hash"],
                condition=Q(subject_value_hash__isnull=False),
                name="tombstone_subject_value",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.memory_id or self.scope_hash[:12]}"


class RefusedWrite(models.Model):
    """A write refused because it would have brought deleted content back (logged, content-free)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    tombstone = models.ForeignKey(Tombstone, on_delete=models.PROTECT, related_name="refusals")
    path = models.CharField(max_length=40)
    actor = models.CharField(max_length=150)
    why = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.path} by {self.actor} at {self.at:%Y-%m-%d %H:%M}"


class Backup(models.Model):
    """The backup catalogue: each backup taken, where it is, and until when it is kept."""

    taken_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    path = models.CharField(max_length=500)
    method = models.CharField(max_length=20)
    size_bytes = models.BigIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["taken_at"], name="backup_taken")]

    def __str__(self) -> str:
        return f"{self.taken_at:%Y-%m-%d %H:%M} until {self.expires_at:%Y-%m-%d}"
