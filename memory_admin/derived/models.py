"""Where copies of facts live on, with lineage (PRODUCT.md rule 10): raw conversation events, summaries,
scheduled actions, agents' loaded contexts with their invalidation notices, cache manifests, and the log
of what stale propagation did to each dependant."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, cast

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, ExpressionWrapper, F, OuterRef, Q
from django.utils import timezone

from memory_admin.accounts.models import Tenant
from memory_admin.lib.sealing import Fact, SealedJSONField, SealedTextField, item_fact
from memory_admin.memory.models import MemoryRecord, Project, PublicIdModel

# The longest subject id an event can be tagged with (the events API's limit).
SUBJECT_ID_MAX_LENGTH = 200


def subject_tags(subject_ids: Any) -> list[str]:
    """The distinct subject ids an event's `subject_ids` tags it with, in order (anything else is ignored)."""
    if not isinstance(subject_ids, list):
        return []
    tags = (s for s in subject_ids if isinstance(s, str) and 0 < len(s) <= SUBJECT_ID_MAX_LENGTH)
    return list(dict.fromkeys(tags))


class EventQuerySet(models.QuerySet["Event"]):
    def visible(self) -> EventQuerySet:
        """The lines every read may return: not hidden row by row (`hidden_at`), and not hidden by a rule
        (`EventHide`). The one place the events' hiding rule is read; `removed` is its complement."""
        return self.filter(hidden_at__isnull=True).exclude(_hidden_by_rule())

    def removed(self) -> EventQuerySet:
        """The lines a deletion took from reads: hidden row by row or by a rule, or already redacted."""
        return self.filter(Q(hidden_at__isnull=False) | Q(redacted_at__isnull=False) | Q(_hidden_by_rule()))

    # (ignore: django-stubs leaves the parent's model type unbound in a QuerySet subclass)
    def bulk_create(  # type: ignore[override]
        self,
        objs: Iterable[Event],
        batch_size: int | None = None,
        ignore_conflicts: bool = False,
        update_conflicts: bool = False,
        update_fields: Collection[str] | None = None,
        unique_fields: Collection[str] | None = None,
    ) -> list[Event]:
        """Events and their EventSubject rows together (the rows need the events' ids: both backends
        return them from a bulk insert, except with ignore_conflicts, whose skipped rows have none)."""
        with transaction.atomic(using=self.db, savepoint=False):
            created: Any = super().bulk_create(
                cast(Any, objs), batch_size, ignore_conflicts, update_conflicts, update_fields, unique_fields
            )
            events = cast(list[Event], created)
            rows = [row for event in events if event.pk is not None for row in event.subject_rows()]
            # An upserted event may already have its rows: those are left as they are.
            EventSubject.objects.using(self.db).bulk_create(rows, batch_size=batch_size, ignore_conflicts=True)
        return events


class Event(PublicIdModel):
    """A raw conversation event (the log store). Append-only; a deletion may only redact its text.

    `subject_ids` is what the API reads and writes; its EventSubject rows are what lookups by subject use
    (a JSON containment lookup is PostgreSQL-only and unindexed). `save` and `bulk_create` keep both in step.
    """

    public_prefix = "evt"
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)  # see Meta.indexes
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="events")
    session_id = models.CharField(max_length=200)
    actor = models.CharField(max_length=200)
    text = models.TextField()
    occurred_at = models.DateTimeField()
    subject_ids = models.JSONField(default=list, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)
    # Hidden from every read once a deletion covers it (stage 2); its text is redacted in stage 3.
    hidden_at = models.DateTimeField(null=True, blank=True)
    redacted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The events list: a project's events, newest first; a session's events.
            models.Index(fields=["tenant", "project", "-id"], name="event_project_newest"),
            models.Index(fields=["tenant", "session_id", "id"], name="event_session"),
        ]

    objects = EventQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.public_id} {self.session_id} {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        adding = self._state.adding
        update_fields = kwargs.get("update_fields")
        with transaction.atomic(using=kwargs.get("using")):
            super().save(*args, **kwargs)
            if adding:
                EventSubject.objects.using(self._state.db).bulk_create(self.subject_rows())
            elif update_fields is None or "subject_ids" in update_fields:
                self.sync_subjects()

    def subject_rows(self) -> list[EventSubject]:
        return [
            EventSubject(event_id=self.pk, tenant_id=self.tenant_id, project_id=self.project_id, subject_id=s)
            for s in subject_tags(self.subject_ids)
        ]

    def sync_subjects(self) -> None:
        """Make the EventSubject rows match `subject_ids` (after a save that may have changed it)."""
        rows = EventSubject.objects.using(self._state.db).filter(event_id=self.pk)
        wanted = subject_tags(self.subject_ids)
        rows.exclude(subject_id__in=wanted).delete()
        have = set(rows.values_list("subject_id", flat=True))
        EventSubject.objects.using(self._state.db).bulk_create(
            [r for r in self.subject_rows() if r.subject_id not in have]
        )


class EventSubject(models.Model):
    """One subject an event is tagged with: a subject's lines are an index lookup on every backend.

    Tenant and project are copied from the event (never change: events are append-only), so the lookup
    stays inside one tenant's (and project's) part of the index even when subject ids repeat across tenants.
    """

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="subjects", db_index=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    subject_id = models.CharField(max_length=SUBJECT_ID_MAX_LENGTH)

    class Meta:
        constraints = [
            # Also the index that finds an event's rows (redaction, cascade).
            models.UniqueConstraint(fields=["event", "subject_id"], name="event_subject_unique"),
        ]
        indexes = [
            # A tenant's events about a subject (the events API), optionally in one project (deletion).
            models.Index(fields=["tenant", "subject_id", "project", "event"], name="event_subject_lookup"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} ∋ {self.subject_id}"


class EventHide(models.Model):
    """A rule that hides a project's lines about one subject, instead of an UPDATE of each: the lines tagged
    with `subject_id` or whose text contains it (the `contains` lookup, as the deletion's own search for
    them), up to `through_event_id`, the project's newest line when the rule was set.

    A deletion sets one when it accepts a subject's erasure, in the acceptance transaction: one row, where
    hiding a subject's 100,000 lines one by one took most of that transaction. Its purge then redacts those
    lines, marks them hidden row by row and deletes the rule in one transaction, so the subject id is kept
    here no longer than the lines themselves hold it. `hidden_by` names who set it (a deletion's public id).
    Read by `EventQuerySet.visible` and `removed` only."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    subject_id = models.CharField(max_length=SUBJECT_ID_MAX_LENGTH)
    through_event_id = models.BigIntegerField()
    hidden_by = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # The rules of a line's project (every events read), and a deletion's own (its purge).
            models.Index(fields=["tenant", "project"], name="event_hide_project"),
            models.Index(fields=["hidden_by"], name="event_hide_by"),
        ]

    def __str__(self) -> str:
        return f"lines of project {self.project_id} through {self.through_event_id} ({self.hidden_by})"


def naming(tenant_id: int, project_id: int, subjects: Collection[str]) -> Q:
    """The lines of a project that name one of `subjects`: tagged with it (the EventSubject index, hashed once),
    or containing it in their text (LIKE '%…%': case-sensitive on PostgreSQL; SQLite's LIKE ignores ASCII
    case, so there it takes a few more lines, never fewer). The set form of the condition an `EventHide`
    applies to each line (`_hidden_by_rule`): a deletion finds, counts and redacts the lines with this one.
    One condition per subject, never one per record. No subject: no line."""
    if not subjects:
        return Q(pk__in=[])
    tagged = EventSubject.objects.filter(tenant_id=tenant_id, subject_id__in=subjects, project_id=project_id)
    q = Q(pk__in=tagged.values("event_id"))
    for subject in subjects:
        q |= Q(text__contains=subject)
    return q


def _hidden_by_rule() -> Exists:
    """Whether an `EventHide` of the line's tenant and project covers the line (for a queryset of events): the
    per-line form of `naming`, bounded by the rule's `through_event_id`."""
    tagged = EventSubject.objects.filter(event_id=OuterRef(OuterRef("pk")), subject_id=OuterRef("subject_id"))
    line = ExpressionWrapper(OuterRef("text"), output_field=models.TextField())
    rules = (
        EventHide.objects.filter(
            tenant_id=OuterRef("tenant_id"), project_id=OuterRef("project_id"), through_event_id__gte=OuterRef("pk")
        )
        .annotate(line=line)
        .filter(Q(Exists(tagged)) | Q(line__contains=F("subject_id")))
    )
    return Exists(rules)


class Lineage(models.TextChoices):
    CURRENT = "current", "Current"
    STALE = "stale", "Stale"
    SUSPENDED = "suspended", "Suspended"
    WITHDRAWN = "withdrawn", "Withdrawn"


class Summary(PublicIdModel):
    """A text derived from memory records; it goes stale when a base stops being the current belief."""

    public_prefix = "sum"
    Status = Lineage
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="summaries")
    kind = models.CharField(max_length=50, default="text")
    # Sealed under a key of its own (lib.sealing.item_fact), destroyed when a deletion removes the summary.
    text = SealedTextField(purpose="summary.text")
    derived_from = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Lineage.choices, default=Lineage.CURRENT)
    status_reason = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    replaces = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # Hidden from every read once a deletion covers one of its bases (stage 2); deleted in stage 3.
    hidden_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "summaries"
        indexes = [models.Index(fields=["tenant", "status", "-id"], name="summary_tenant_status")]

    def sealing_fact(self) -> Fact | None:
        return item_fact(self.tenant_id, self.project_id, "summary", self.public_id)

    def __str__(self) -> str:
        return f"{self.public_id} ({self.status})"


class SummaryBase(models.Model):
    """One base of a summary; propagation finds a record's summaries through these rows."""

    summary = models.ForeignKey(Summary, on_delete=models.CASCADE, related_name="bases")
    record = models.ForeignKey(MemoryRecord, on_delete=models.CASCADE, related_name="summary_uses")
    revision = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["summary", "record"], name="summary_base_unique")]

    def __str__(self) -> str:
        return f"{self.summary_id} ← {self.record_id} r{self.revision}"


class ScheduledAction(PublicIdModel):
    """An action an agent planned from facts. Suspended when a base changes, until re-confirmed."""

    class Status(models.TextChoices):
        SCHEDULED = "scheduled", "Scheduled"
        SUSPENDED = "suspended", "Suspended"
        CANCELLED = "cancelled", "Cancelled"
        DONE = "done", "Done"

    public_prefix = "act"
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="scheduled_actions")
    agent = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=100)
    # Sealed under a key of its own (lib.sealing.item_fact), destroyed when a deletion blanks the action.
    payload = SealedJSONField(default=dict, blank=True, purpose="action.payload")
    due_at = models.DateTimeField()
    derived_from = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.SCHEDULED)
    status_reason = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["tenant", "status", "due_at"], name="action_tenant_status_due")]

    def sealing_fact(self) -> Fact | None:
        return item_fact(self.tenant_id, self.project_id, "action", self.public_id)

    def __str__(self) -> str:
        return f"{self.public_id} {self.kind} ({self.status})"


class ActionBase(models.Model):
    action = models.ForeignKey(ScheduledAction, on_delete=models.CASCADE, related_name="bases")
    record = models.ForeignKey(MemoryRecord, on_delete=models.CASCADE, related_name="action_uses")
    revision = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["action", "record"], name="action_base_unique")]

    def __str__(self) -> str:
        return f"{self.action_id} ← {self.record_id} r{self.revision}"


class ContextLoad(PublicIdModel):
    """What an agent loaded into a working context (one session), until it expires."""

    public_prefix = "ctx"
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    agent = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    session_id = models.CharField(max_length=200)
    loaded_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "agent", "-id"], name="context_agent_newest")]

    def __str__(self) -> str:
        return f"{self.public_id} {self.session_id}"


class ContextItem(models.Model):
    load = models.ForeignKey(ContextLoad, on_delete=models.CASCADE, related_name="items")
    record = models.ForeignKey(MemoryRecord, on_delete=models.CASCADE, related_name="context_uses")
    revision = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["load", "record"], name="context_item_unique")]

    def __str__(self) -> str:
        return f"{self.load_id} ← {self.record_id} r{self.revision}"


class Invalidation(PublicIdModel):
    """A notice to an agent session that a memory it loaded is no longer the current belief.

    Delivered is not applied: it stays open until the agent acknowledges it (or the session expires).
    """

    public_prefix = "inv"
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    agent = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    load = models.ForeignKey(ContextLoad, on_delete=models.CASCADE, related_name="invalidations")
    record = models.ForeignKey(MemoryRecord, on_delete=models.SET_NULL, null=True, related_name="invalidations")
    memory_id = models.CharField(max_length=64, default="")  # kept when the record itself is purged
    revision = models.PositiveIntegerField()
    reason = models.TextField(blank=True)
    successor = models.ForeignKey(MemoryRecord, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One notice per loaded copy; propagation may run again without duplicating it.
            models.UniqueConstraint(fields=["load", "record"], name="invalidation_once_per_copy"),
        ]
        indexes = [
            # An agent's open notices, oldest first (the agent API and the agents page).
            models.Index(
                fields=["tenant", "agent", "id"], condition=Q(acknowledged_at__isnull=True), name="invalidation_open"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.record_id}"


class CacheEntry(models.Model):
    """The manifest of a cache key: which records it depends on, so keys are found without scanning."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    key = models.CharField(max_length=250, unique=True)
    kind = models.CharField(max_length=20, default="answer")
    created_at = models.DateTimeField(default=timezone.now)
    evicted_at = models.DateTimeField(null=True, blank=True)
    records = models.ManyToManyField(MemoryRecord, related_name="cache_entries")

    def __str__(self) -> str:
        return self.key


class Propagation(models.Model):
    """What stale propagation did to one dependant of a record that left the current belief."""

    class Kind(models.TextChoices):
        SUMMARY = "summary", "Summary"
        ACTION = "action", "Scheduled action"
        CONTEXT = "context", "Loaded context"
        CACHE = "cache", "Cache key"
        VECTOR = "vector", "Vector entry"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    record = models.ForeignKey(MemoryRecord, on_delete=models.CASCADE, related_name="propagations")
    dependant_kind = models.CharField(max_length=10, choices=Kind.choices)
    dependant_id = models.CharField(max_length=250)
    action = models.CharField(max_length=40)
    reason = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["record", "-id"], name="propagation_record_newest")]

    def __str__(self) -> str:
        return f"{self.record_id} → {self.dependant_kind} {self.dependant_id}: {self.action}"


class ExportFile(models.Model):
    """A project export (JSONL) kept on disk for download; a deletion withholds, rewrites or removes it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="exports")
    path = models.CharField(max_length=500)
    rows = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+")
    withheld = models.BooleanField(default=False)  # a deletion covering it is under way
    removed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.path


class PendingVector(models.Model):
    """A record whose vector entry is not written yet (read-your-writes for search, docs/retrieval.md).

    Written in the transaction that wrote the record (the `records_changed` hook, `propagation.mark_pending`), and
    deleted by `tasks.refresh_record_vectors` once the entry is in the index. Until then `search` matches the record
    from the database by its words and merges it into the index's ranking, under the same usability rule, so a
    fact is findable the moment its write is acknowledged. No copy of the content: the record is read through the
    live manager (a deletion's hiding applies), and the row goes with the record when a purge deletes it (CASCADE).
    """

    record = models.OneToOneField(MemoryRecord, on_delete=models.CASCADE, primary_key=True, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)  # see Meta
    queued_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # search: the tenant's newest pending records (`search.pending_matches`, newest first, bounded).
            models.Index(fields=["tenant", "-record"], name="pending_vector_newest"),
        ]

    def __str__(self) -> str:
        return f"record {self.record_id} awaits its vector entry"
