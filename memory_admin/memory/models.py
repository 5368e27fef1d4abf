"""The bitemporal record store: projects, memory records, disputes, field policies and the audit log.

Time axes (PRODUCT.md rule 5):
- valid time `valid_from`/`valid_to`: when the fact holds in the world;
- record time `recorded_from`/`recorded_to`: when the system believed the record to be current.
When a later record cuts a record's validity short, `valid_to` gets the cut and
`valid_to_recorded_at` says when the cut was recorded; `asserted_valid_to` keeps the validity as first
asserted, so "what did we believe on Oct 21" still sees the open-ended value of that day.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, models
from django.db.models import Expression, Q
from django.utils import timezone

from memory_admin.accounts.models import Tenant
from memory_admin.lib import rows
from memory_admin.lib.ids import new_public_id as new_public_id  # re-exported for the layers above
from memory_admin.lib.sealing import Fact, SealedJSONField, SealedTextField, SystemOfField


class PublicIdModel(models.Model):
    """A row named in the API by `<public_prefix>-<random hex>`, given on first save (memory, derived and
    deletion rows alike)."""

    public_prefix = ""
    public_id = models.CharField(max_length=64, unique=True, default="")

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.public_id:
            self.public_id = new_public_id(self.public_prefix)
        super().save(*args, **kwargs)


class Project(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="projects")
    key = models.CharField(max_length=100)  # the public `project_id`
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Every API call resolves `project_id` through (tenant, key).
            models.UniqueConstraint(fields=["tenant", "key"], name="project_unique_key_per_tenant"),
        ]

    def __str__(self) -> str:
        return self.key


class RecordQuerySet(models.QuerySet["MemoryRecord"]):
    def for_tenant(self, tenant: Tenant | int) -> RecordQuerySet:
        return self.filter(tenant=tenant)

    def for_fact(self, project: Project, subject_id: str, predicate: str) -> RecordQuerySet:
        return self.filter(
            tenant_id=project.tenant_id,
            project=project,
            subject_id=subject_id,
            predicate=predicate,
        )

    def current(self, now: datetime | None = None) -> RecordQuerySet:
        """Accepted records whose validity covers `now`: the answers an agent may be given today."""
        now = now or timezone.now()
        return self.filter(status=MemoryRecord.Status.ACCEPTED, valid_from__lte=now).filter(
            Q(valid_to__isnull=True) | Q(valid_to__gt=now)
        )

    def as_of(self, valid_at: datetime, known_at: datetime) -> RecordQuerySet:
        """Records that answered for valid instant `valid_at` in the beliefs held at `known_at`.

        A record counts when it had been recorded by `known_at`, was once the current belief (late
        imports and losing dispute candidates never were), and its validity as known at `known_at`
        covers `valid_at`: the cut `valid_to` if the cut had been recorded by then, else the validity
        as first asserted.
        """
        cut_known = Q(valid_to_recorded_at__isnull=True) | Q(valid_to_recorded_at__lte=known_at)
        within_cut = Q(valid_to__isnull=True) | Q(valid_to__gt=valid_at)
        within_asserted = Q(asserted_valid_to__isnull=True) | Q(asserted_valid_to__gt=valid_at)
        return self.filter(
            entered_current=True,
            status__in=MemoryRecord.ANSWERING_STATUSES,
            recorded_from__lte=known_at,
            valid_from__lte=valid_at,
        ).filter((cut_known & within_cut) | (Q(valid_to_recorded_at__gt=known_at) & within_asserted))

    def kept_fresh(self, now: datetime) -> RecordQuerySet:
        """Accepted records whose validity has not ended by `now`: the one in effect now (the answer read for
        acting today, which is not the head while a successor is scheduled) and any scheduled successor.
        The recheck engine keeps these fresh; `MemoryRecord.kept_fresh_at` is the same rule for one row."""
        return self.filter(status=MemoryRecord.Status.ACCEPTED).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=now))

    def due_for_recheck(self, now: datetime) -> RecordQuerySet:
        # Served by the partial index `record_due_for_recheck` (accepted rows by recheck_after); the validity
        # condition is checked on the rows the index finds.
        return self.kept_fresh(now).filter(recheck_after__lte=now)

    def in_project(self, tenant: Tenant | int, project_key: str) -> RecordQuerySet:
        """Records of the tenant's project named `project_key` (the API's `project_id`, the dashboard's filter).

        The key is resolved in a subquery rather than a join: PostgreSQL runs it once (an InitPlan) and then
        knows `project_id` as a constant, so an index led by it is walked in the list's order and stops after
        a page, where a join has to fetch and sort every match. An unknown key matches nothing.
        """
        tenant_id = tenant if isinstance(tenant, int) else tenant.pk
        project = Project.objects.filter(tenant_id=tenant_id, key=project_key).values("pk")[:1]
        return self.filter(project_id=models.Subquery(project))

    def with_public_relations(self) -> RecordQuerySet:
        """Everything the record format renders, in a constant number of queries. Of the successor only its
        `memory_id` is rendered, so only that column of the joined row is read (a page of 50 rows otherwise
        decodes 50 more full rows, values and all)."""
        return (
            self.select_related("project", "issuer", "superseded_by")
            .defer(*_SUCCESSOR_UNRENDERED)
            .prefetch_related(
                models.Prefetch(
                    "supersedes",
                    queryset=MemoryRecord.objects.only("id", "memory_id", "superseded_by_id"),
                )
            )
        )

    def live(self) -> RecordQuerySet:
        """The records reads may return: not tombstoned, and not hidden by a `RecordHide` rule. The one place the
        records' hiding is read (the live manager applies it); `removed` is its complement."""
        return self.filter(tombstoned_at__isnull=True).filter(~HiddenByRule())

    def live_for_scan(self) -> RecordQuerySet:
        """`live` for a large scan an index answers alone (the recheck sweep's claim, on `all_objects`): the rule's
        condition reads columns no such index holds, so on PostgreSQL it is added only while some rule exists
        (`_unhidden_while`). Without a rule both select the same rows; a rule set just after the probe hides
        records the caller reads again through `live`."""
        return self.filter(tombstoned_at__isnull=True)._unhidden_while(RecordHide.objects.all())

    def countable(self, tenant: Tenant | int) -> RecordQuerySet:
        """The tenant's records for a count by a status other than "deleted" (on `all_objects`): tombstoned
        records are out by their status already (a deletion sets "deleted" with `tombstoned_at`), so an index
        may answer alone; records hidden by a rule keep their status until their purge, so while the tenant
        has a rule (a deletion between acceptance and purge) they are left out with it."""
        tenant_id = tenant if isinstance(tenant, int) else tenant.pk
        return self.for_tenant(tenant)._unhidden_while(RecordHide.objects.filter(tenant_id=tenant_id))

    def _unhidden_while(self, rules: models.QuerySet[RecordHide]) -> RecordQuerySet:
        """These records without the ones a rule hides, the rule tested only where it may apply: on PostgreSQL
        while one of `rules` exists (one probe of a table that is empty but during a deletion, so that an index
        may still answer alone); elsewhere always (SQLite has no such scan to keep, so no probe is spent)."""
        if connection.vendor != "postgresql" or rules.exists():
            return self.filter(~HiddenByRule())
        return self

    def removed(self) -> RecordQuerySet:
        """The records a deletion took from reads: tombstoned, or hidden by a rule until their purge."""
        return self.filter(Q(tombstoned_at__isnull=False) | Q(HiddenByRule()))


class LiveRecordManager(models.Manager.from_queryset(RecordQuerySet)):  # type: ignore[misc]
    """Every read path goes through this manager: a record a deletion has taken from reads (tombstoned, or
    hidden by a `RecordHide` rule) is never returned."""

    def get_queryset(self) -> RecordQuerySet:
        return super().get_queryset().live()


class RecordHide(models.Model):
    """A rule that hides one project's records of a subject (or of a predicate), instead of an UPDATE of each:
    the records with ids from `first_id` to `last_id` (the ones a deletion resolved) whose `subject_id` equals
    the rule's, or, for a predicate's rule (`subject_id` empty), whose `predicate` equals the rule's.

    A deletion of a subject or a predicate sets one in its acceptance transaction: one row, where marking a
    subject's 10,000 records took most of that transaction (its heap and every index, 0.35-0.5 s). The
    overview's counters move the hidden records to "deleted" in the same transaction (`stats.count_as_deleted`).
    Its purge marks the records tombstoned (counters already moved), deletes the rule and then the records, in
    one transaction, so the subject id is kept here no longer than the records hold it. `hidden_by` names who
    set it (a deletion's public id). Read by `RecordQuerySet.live` and `removed`, and by `HIDDEN_SQL` in the
    statements written as SQL."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+", db_index=False)
    subject_id = models.CharField(max_length=200, blank=True)
    predicate = models.CharField(max_length=200, blank=True)
    first_id = models.BigIntegerField()
    last_id = models.BigIntegerField()
    hidden_by = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # The rules of a record's project (every records read), and a deletion's own (its purge).
            models.Index(fields=["tenant", "project"], name="record_hide_project"),
            models.Index(fields=["hidden_by"], name="record_hide_by"),
        ]
        constraints = [
            # Exactly one of the two: a subject's rule or a predicate's.
            models.CheckConstraint(
                condition=(Q(subject_id="") & ~Q(predicate="")) | (~Q(subject_id="") & Q(predicate="")),
                name="record_hide_one_scope",
            ),
        ]

    def __str__(self) -> str:
        scope = f"subject {self.subject_id}" if self.subject_id else f"predicate {self.predicate}"
        return f"records of {scope} in project {self.project_id}, ids {self.first_id}-{self.last_id} ({self.hidden_by})"

    def covered(self) -> RecordQuerySet:
        """The records this rule hides (any state)."""
        records = MemoryRecord.all_objects.filter(
            tenant_id=self.tenant_id, project_id=self.project_id, id__gte=self.first_id, id__lte=self.last_id
        )
        if self.subject_id:
            return records.filter(subject_id=self.subject_id)
        return records.filter(predicate=self.predicate)


# Whether a `RecordHide` of the record's tenant and project covers the record row aliased `{t}`: the one text of
# the rule, used by `HiddenByRule` in querysets and as it is in the statements written as SQL (the overview's
# counts, the counters' recount).
HIDDEN_SQL = (
    "EXISTS (SELECT 1 FROM memory_recordhide h WHERE h.tenant_id = {t}.tenant_id AND h.project_id = {t}.project_id"
    " AND h.first_id <= {t}.id AND h.last_id >= {t}.id AND ((h.subject_id = {t}.subject_id AND h.predicate = '')"
    " OR (h.subject_id = '' AND h.predicate = {t}.predicate)))"
)


class HiddenByRule(Expression):
    """`HIDDEN_SQL` on the records row of the query it is compiled in (its base table's alias, `U0` in a
    subquery), negated by `~`. Written out rather than an `Exists` of a queryset: the live manager adds it to every
    read, and compiling that subquery cost a list page ~3 ms of Python (4.2 ms to compile the list's query instead
    of 1.1 ms)."""

    conditional = True

    def __init__(self, negated: bool = False) -> None:
        super().__init__(output_field=models.BooleanField())
        self.negated = negated

    def __invert__(self) -> HiddenByRule:  # type: ignore[override]  # (a condition negated, not NegatedExpression)
        return HiddenByRule(not self.negated)

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        alias = compiler.quote_name_unless_alias(compiler.query.get_initial_alias())
        sql = HIDDEN_SQL.format(t=alias)
        return (f"NOT {sql}" if self.negated else sql), ()


class MemoryRecord(models.Model):
    class Status(models.TextChoices):
        ACCEPTED = "accepted", "Accepted"
        SUPERSEDED = "superseded", "Superseded"
        DISPUTED = "disputed", "Disputed"
        EXCLUDED = "excluded", "Excluded"
        EXPIRED = "expired", "Expired"
        DELETED = "deleted", "Deleted (tombstoned, awaiting purge)"

    # Statuses whose record can answer an as-of question (excluded and disputed never do).
    ANSWERING_STATUSES = (Status.ACCEPTED, Status.SUPERSEDED, Status.EXPIRED)

    # No index of its own: every index of the table that a query by tenant needs begins with tenant_id.
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="records")
    memory_id = models.CharField(max_length=64, unique=True, default="")
    subject_id = models.CharField(max_length=200)
    predicate = models.CharField(max_length=200)
    # Sealed under the fact's data key (lib.sealing): a deletion destroys the key, so old copies cannot be read.
    value = SealedJSONField(purpose="record.value")
    status = models.CharField(max_length=12, choices=Status.choices)
    status_reason = SealedTextField(blank=True, purpose="record.status_reason")

    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    asserted_valid_to = models.DateTimeField(null=True, blank=True)
    valid_to_recorded_at = models.DateTimeField(null=True, blank=True)
    recorded_from = models.DateTimeField()
    recorded_to = models.DateTimeField(null=True, blank=True)

    last_verified_at = models.DateTimeField(null=True, blank=True)
    recheck_after = models.DateTimeField(null=True, blank=True)
    retain_until = models.DateTimeField(null=True, blank=True)

    revision = models.PositiveIntegerField()
    # Sealed like the value (a ref may name the person: "crm:contacts/alice@example.com"); its system ("crm") stays
    # in clear in `source_system` for the records list's source filter (memory.filters).
    source_canonical_ref = SealedTextField(purpose="record.source_ref")
    source_system = SystemOfField(of="source_canonical_ref")
    source_revision = models.CharField(max_length=100)
    issuer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")

    # True once the record has been the current belief; late imports and losing candidates never are.
    entered_current = models.BooleanField(default=False)
    # The version the next compare-and-swap is checked against (one per fact key).
    is_head = models.BooleanField(default=False)
    superseded_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="supersedes",
    )
    derived_from = models.JSONField(default=list, blank=True)
    # The raw conversation events (public ids) this record was extracted from: `source.event_ids`.
    source_event_ids = models.JSONField(default=list, blank=True)

    # The recheck engine's claim: a sweep sets it before enqueueing, so two sweeps never take one record.
    recheck_claimed_at = models.DateTimeField(null=True, blank=True)
    # Set when a recheck needs a person (an ambiguous source, a manual field due); cleared on verification. Sealed
    # (lib.sealing): it may quote the source's value or a person's note.
    attention = SealedTextField(blank=True, purpose="record.attention")

    # Set when a deletion request hides the record (stage 2); the row itself is purged in stage 3.
    tombstoned_at = models.DateTimeField(null=True, blank=True)

    objects = LiveRecordManager()
    # Deletion adapters only: includes tombstoned rows awaiting purge.
    all_objects = RecordQuerySet.as_manager()
    # Every query's rows built without Django's per-field constructor calls (lib.rows.from_db): a list page's
    # 50 records, a fact's history, a deletion's scope.
    from_db: classmethod[MemoryRecord, ..., MemoryRecord] = classmethod(rows.from_db)

    class Meta:
        constraints = [
            # Revisions count versions of one fact key; `history()` and next-revision use it.
            models.UniqueConstraint(
                fields=["tenant", "project", "subject_id", "predicate", "revision"],
                name="record_unique_fact_revision",
            ),
            # The compare-and-swap target: at most one head per fact key (assert_fact's lookup).
            models.UniqueConstraint(
                fields=["tenant", "project", "subject_id", "predicate"],
                condition=Q(is_head=True),
                name="record_one_head_per_fact",
            ),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gte=models.F("valid_from")),
                name="record_valid_range_ordered",
            ),
            # On PostgreSQL, migration 0002 adds `record_one_belief_per_valid_instant`, an exclusion
            # constraint over accepted rows' valid ranges.
        ]
        indexes = [
            # Records list, newest first, per tenant (cursor pagination on id).
            models.Index(fields=["tenant", "-id"], name="record_tenant_newest"),
            # Records list filtered by status (dashboard and API `status=`).
            models.Index(fields=["tenant", "status", "-id"], name="record_tenant_status_newest"),
            # Records list filtered by subject or predicate across projects.
            models.Index(
                fields=["tenant", "subject_id", "-id"],
                name="record_tenant_subject_newest",
            ),
            models.Index(
                fields=["tenant", "predicate", "-id"],
                name="record_tenant_predicate_newest",
            ),
            # Records list filtered by source (the page's `source=`): by the ref's clear system, newest first.
            models.Index(
                fields=["tenant", "source_system", "-id"],
                name="record_tenant_source_newest",
            ),
            # Records list filtered by project and predicate (dashboard `?project&predicate`, default view
            # accepted): newest first within one field of one project, and its capped count, without scanning
            # the predicate across projects or the exclusion constraint's GiST index (1.1 s p95 at 10M).
            models.Index(
                fields=["tenant", "project", "predicate", "status", "-id"],
                name="record_project_field_newest",
            ),
            # The recheck sweep: live accepted rows past recheck_after; covering (tenant for row-level
            # security, valid_to), so claim_due is an index-only scan (migration 0010).
            models.Index(
                fields=["recheck_after", "id"],
                include=["tenant", "valid_to"],
                condition=Q(status="accepted", tombstoned_at__isnull=True, recheck_after__isnull=False),
                name="record_due_for_recheck",
            ),
        ]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.memory_id:
            self.memory_id = new_public_id("mem")
        super().save(*args, **kwargs)

    def sealing_fact(self) -> Fact:
        """The data key this record's value is sealed under (lib.sealing): its fact's."""
        return Fact(self.tenant_id, self.project_id, self.subject_id, self.predicate)

    def __str__(self) -> str:
        return f"{self.memory_id} {self.subject_id}.{self.predicate} r{self.revision}"

    def is_current_at(self, now: datetime) -> bool:
        """The current belief at `now`: accepted and valid then (as `RecordQuerySet.current`).

        Not "the fact's head": the head is the compare-and-swap target, and after a future-effective
        assertion it is the successor that is not in effect yet, while today's record (no longer the head)
        stays the answer until the hand-over. At most one accepted record per fact covers any instant
        (`record_one_belief_per_valid_instant`), so this names one record per fact.
        """
        return (
            self.status == self.Status.ACCEPTED
            and self.valid_from <= now
            and (self.valid_to is None or self.valid_to > now)
        )

    def kept_fresh_at(self, now: datetime) -> bool:
        """Whether the recheck engine keeps this record fresh at `now` (as `RecordQuerySet.kept_fresh`): the
        record in effect now, or a scheduled successor. Not "the head" alone: while a successor is scheduled,
        the head is the successor, and today's value (read for answering and acting today) must not be skipped.
        """
        return self.status == self.Status.ACCEPTED and (self.valid_to is None or self.valid_to > now)

    # Which curation a record's status allows: actions.exclude_record / expire_record enforce these, and the
    # dashboard offers a control only where they hold (role checks apart).
    @property
    def excludable(self) -> bool:
        """Not excluded already, and not in an open dispute (resolving the dispute decides it)."""
        return self.status not in (self.Status.EXCLUDED, self.Status.DISPUTED)

    @property
    def expirable(self) -> bool:
        """Only an accepted record can expire."""
        return self.status == self.Status.ACCEPTED


# The successor's columns `with_public_relations` leaves unread: all but the key and `memory_id`.
_SUCCESSOR_UNRENDERED = tuple(
    f"superseded_by__{f.name}" for f in MemoryRecord._meta.concrete_fields if f.name not in ("id", "memory_id")
)


class Dispute(PublicIdModel):
    """Equal-rank sources that disagree and cannot be ordered: both kept until a person decides."""

    public_prefix = "dsp"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        RESOLVED = "resolved", "Resolved"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="disputes")
    subject_id = models.CharField(max_length=200)
    predicate = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    candidates = models.ManyToManyField(MemoryRecord, related_name="disputes")
    opened_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    winner = models.ForeignKey(MemoryRecord, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # A person's reasons are written about the values: sealed under the fact's data key (lib.sealing).
    resolution_reason = SealedTextField(blank=True, purpose="dispute.resolution_reason")

    class Meta:
        constraints = [
            # assert_fact looks up the open dispute of a fact key; there is at most one.
            models.UniqueConstraint(
                fields=["tenant", "project", "subject_id", "predicate"],
                condition=Q(status="open"),
                name="dispute_one_open_per_fact",
            ),
        ]
        indexes = [
            # The disputes queue: open disputes of a tenant, oldest first.
            models.Index(fields=["tenant", "status", "id"], name="dispute_tenant_queue"),
        ]

    def sealing_fact(self) -> Fact:
        return Fact(self.tenant_id, self.project_id, self.subject_id, self.predicate)

    def __str__(self) -> str:
        return f"{self.public_id} {self.subject_id}.{self.predicate} ({self.status})"


class FieldPolicy(models.Model):
    """Per field (predicate, optionally per project): who may update it and how it stays fresh."""

    class OnFailure(models.TextChoices):
        ANSWER_WITH_CAVEAT = "answer_with_caveat", "Answer with a caveat"
        BLOCK_ACTION = "block_action", "Block actions"

    class Risk(models.TextChoices):
        LOW = "low", "Low"
        HIGH = "high", "High"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(
        Project,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="policies",
    )
    predicate = models.CharField(max_length=200)
    authorized_issuers = models.JSONField(default=list, blank=True)
    canonical_ref_prefix = models.CharField(max_length=500, blank=True)
    canonical_source = models.JSONField(null=True, blank=True)
    recheck_interval = models.DurationField(null=True, blank=True)
    recheck_before_action = models.BooleanField(default=False)
    on_failure = models.CharField(max_length=20, choices=OnFailure.choices, default=OnFailure.ANSWER_WITH_CAVEAT)
    risk = models.CharField(max_length=4, choices=Risk.choices, default=Risk.LOW)
    retention_days = models.PositiveIntegerField(null=True, blank=True)
    # An agent may expire a fact of this field that it asserted itself (not on a high-risk field); otherwise its
    # expiry is a request an owner decides (ExpiryRequest).
    agents_expire_own = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "field policies"
        constraints = [
            # policy_for() looks a field up by (tenant, project, predicate), then (tenant, predicate).
            models.UniqueConstraint(
                fields=["tenant", "project", "predicate"],
                condition=Q(project__isnull=False),
                name="policy_unique_project_field",
            ),
            models.UniqueConstraint(
                fields=["tenant", "predicate"],
                condition=Q(project__isnull=True),
                name="policy_unique_tenant_field",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project or '*'}:{self.predicate}"


class AuditQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> int:
        raise PermissionError("Audit events are immutable")

    def redact(self, tenant_id: int, object_ids: list[str], marker: str) -> int:
        """The one change the audit log allows: a deletion blanks the snapshots (and reasons) of the
        deleted objects. Who did what to which object, and when, stays."""
        events = self.filter(tenant_id=tenant_id, object_id__in=rows.among(object_ids), redacted_at__isnull=True)
        # The chain keeps the commitments (memory.audit_chain); the nonce goes with the values, so a redacted
        # value cannot be confirmed by guessing it either.
        return models.QuerySet.update(
            events,
            before={"redacted": marker},
            after={"redacted": marker},
            reason=marker,
            nonce="",
            redacted_at=timezone.now(),
        )

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError("Audit events are immutable")


class AuditEvent(models.Model):
    """Who did what to which object, with before/after, written in the same transaction as the change.

    Rows are append-only: the model refuses updates and deletes, and on PostgreSQL a trigger
    (migration 0002) refuses them for any client.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)  # see Meta.indexes
    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+")
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    # A record's snapshots keep its value, source and status reason sealed under the fact's data key, and an event
    # about a fact its reason (memory.audit seals them, lib.sealing); reads open them.
    before = SealedJSONField(null=True, blank=True, purpose="audit.snapshot", snapshot=True)
    after = SealedJSONField(null=True, blank=True, purpose="audit.snapshot", snapshot=True)
    reason = SealedTextField(blank=True, purpose="audit.reason", by_writer=True)
    redacted_at = models.DateTimeField(null=True, blank=True)
    # The tenant's hash chain (memory.audit_chain, docs/security.md "Audit chain"): `hash` covers the event's
    # who/what/when, the commitments to its before, after and reason, and `prev_hash` (the tenant's previous
    # event's hash). A commitment is HMAC-SHA256 keyed by `nonce` (random per event) over the value's canonical
    # JSON; a redaction removes the values and the nonce and keeps the commitments, so the chain still verifies.
    prev_hash = models.CharField(max_length=64, blank=True, default="")
    hash = models.CharField(max_length=64, blank=True, default="")
    nonce = models.CharField(max_length=32, blank=True, default="")
    before_commitment = models.CharField(max_length=64, blank=True, default="")
    after_commitment = models.CharField(max_length=64, blank=True, default="")
    reason_commitment = models.CharField(max_length=64, blank=True, default="")

    objects = AuditQuerySet.as_manager()

    class Meta:
        indexes = [
            # The audit log page: newest first per tenant, and the events of one object.
            models.Index(fields=["tenant", "-id"], name="audit_tenant_newest"),
            # The audit page and the overview's "Recent changes" order by the time shown (AUDIT_ORDER), and the
            # audit page's cursor starts at `at <= cursor`.
            models.Index(fields=["tenant", "-at", "-id"], name="audit_tenant_at_newest"),
            models.Index(
                fields=["tenant", "object_type", "object_id"],
                name="audit_tenant_object",
            ),
        ]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise PermissionError("Audit events are immutable")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("Audit events are immutable")

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_id}"


class AuditChainHead(models.Model):
    """The end of a tenant's audit chain: its last hash and how many events it holds. Appends lock this row
    (SELECT ... FOR UPDATE on PostgreSQL), so concurrent writers of one tenant never fork the chain."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, primary_key=True, related_name="+")
    last_hash = models.CharField(max_length=64, blank=True, default="")
    events = models.BigIntegerField(default=0)
    # The last signed checkpoint: how many events it covered and when it was signed.
    checkpointed_events = models.BigIntegerField(default=0)
    checkpointed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"audit chain of tenant {self.tenant_id}: {self.events} events"


class AuditCheckpoint(models.Model):
    """A signed statement "the tenant's audit chain had `events` events, ending in `event_id` with `event_hash`,
    at `at`" (lib.signing, Ed25519). Written every AUDIT_CHECKPOINT_EVERY events or AUDIT_CHECKPOINT_MINUTES;
    an owner who rewrites the chain consistently cannot re-sign it without the signing key."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    event_id = models.BigIntegerField()
    event_hash = models.CharField(max_length=64)
    events = models.BigIntegerField()
    at = models.DateTimeField()
    algorithm = models.CharField(max_length=16)
    key_id = models.CharField(max_length=64)
    signature = models.CharField(max_length=128)

    class Meta:
        indexes = [models.Index(fields=["tenant", "event_id"], name="audit_checkpoint_tenant_event")]

    def __str__(self) -> str:
        return f"checkpoint of tenant {self.tenant_id} at event {self.event_id}"


class RecheckAttempt(models.Model):
    """One attempt to confirm a record against its field's canonical source (PRODUCT.md rule 7)."""

    class Result(models.TextChoices):
        """What an attempt found; stored in `outcome` (the API's name). Not memory.actions.Outcome."""

        VERIFIED_UNCHANGED = "verified_unchanged", "Verified, unchanged"
        VERIFIED_CHANGED = "verified_changed", "Verified, changed"
        SOURCE_UNAVAILABLE = "source_unavailable", "Source unavailable"
        SOURCE_AMBIGUOUS = "source_ambiguous", "Source ambiguous"
        NOT_CHECKED = "not_checked", "Not checked"

    class Trigger(models.TextChoices):
        SWEEP = "sweep", "Periodic sweep"
        ACTION = "action", "Read for acting"
        DASHBOARD = "dashboard", "Recheck now (dashboard)"
        MANUAL = "manual", "Manual verification"
        REPORT = "report", "Reported by an agent"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    record = models.ForeignKey(MemoryRecord, on_delete=models.CASCADE, related_name="rechecks")
    outcome = models.CharField(max_length=20, choices=Result.choices)
    trigger = models.CharField(max_length=10, choices=Trigger.choices)
    observed_value = SealedJSONField(null=True, blank=True, purpose="recheck.observed_value")
    source_revision = models.CharField(max_length=100, blank=True)
    # Sealed under the record's fact key (lib.sealing), as the record's own ref.
    source_ref = SealedTextField(blank=True, purpose="recheck.source_ref")
    duration_ms = models.PositiveIntegerField(default=0)
    error = SealedTextField(blank=True, purpose="recheck.error")
    reporter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The record that a verified change created (the new current belief).
    new_record = models.ForeignKey(MemoryRecord, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    attempted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # The fact page's recheck history: attempts of a record, newest first.
            models.Index(fields=["record", "-id"], name="recheck_record_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.record_id} {self.outcome} at {self.attempted_at:%Y-%m-%d %H:%M}"

    def sealing_fact(self) -> Fact:
        return self.record.sealing_fact()

    @property
    def verified(self) -> bool:
        return self.outcome in (self.Result.VERIFIED_UNCHANGED, self.Result.VERIFIED_CHANGED)


class ExpiryRequest(PublicIdModel):
    """An agent's ask that a record be expired (LangGraph's or LangMem's delete, `POST .../expiry-requests/`) when it
    may not expire it itself: the record stays as it is until an owner approves (it then expires, kept as history)
    or declines. The reason is memory content: a deletion of the record deletes the request with it (CASCADE)."""

    public_prefix = "exq"

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for an owner"
        APPROVED = "approved", "Approved: expired"
        DECLINED = "declined", "Declined"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    record = models.ForeignKey(MemoryRecord, on_delete=models.CASCADE, related_name="expiry_requests")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = SealedTextField(purpose="expiry.reason")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decision_reason = SealedTextField(blank=True, purpose="expiry.decision_reason")

    def sealing_fact(self) -> Fact:
        return self.record.sealing_fact()

    class Meta:
        constraints = [
            # An agent asking again for the same record finds its pending request, never a second one.
            models.UniqueConstraint(fields=["record"], condition=Q(status="pending"), name="expiry_one_pending"),
        ]
        indexes = [models.Index(fields=["tenant", "status", "id"], name="expiry_request_queue")]

    def __str__(self) -> str:
        return f"Expiry request for {self.record.subject_id} · {self.record.predicate} ({self.get_status_display()})"


class ReceiptChain(models.Model):
    """The head of a tenant's chain of decision receipts: the last sequence number and hash. A receipt's write
    first moves this row (an UPDATE: a row lock on PostgreSQL, the write lock on SQLite), so two receipts of one
    tenant never take the same place in the chain."""

    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, related_name="+")
    sequence = models.PositiveBigIntegerField(default=0)
    head_hash = models.CharField(max_length=64, default="")

    def __str__(self) -> str:
        return f"receipts of tenant {self.tenant_id} up to {self.sequence}"


class DecisionReceipt(PublicIdModel):
    """What one read for acting answered (PRODUCT.md rule 8; issue 35, item 3): the value and revision served or
    the refusal, freshness, the policy, the verification evidence, when; chained per tenant and signed at write.

    `document` is the signed receipt (content-free apart from the fact's identifiers: the value it served is
    committed to by `value_commitment`); `disclosure` holds that value and the commitment's nonce, outside the
    signature, so a deletion erases it (`deletion.stores.receipts`) and the chain and the signature still hold.
    Never changed otherwise; not a foreign key to the record, which a deletion purges."""

    public_prefix = "rcp"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    sequence = models.PositiveBigIntegerField()
    reader = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False)
    project_key = models.CharField(max_length=100)
    subject_id = models.CharField(max_length=200)
    predicate = models.CharField(max_length=200)
    memory_id = models.CharField(max_length=64, blank=True)
    outcome = models.CharField(max_length=40)  # "served", or the refusal's code
    document = models.JSONField()
    hash = models.CharField(max_length=64)
    disclosure = models.JSONField(null=True, blank=True)
    redacted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "sequence"], name="receipt_chain_place")]
        indexes = [
            # The fact page's receipts, newest first; a deletion's receipts by memory id.
            models.Index(fields=["tenant", "project_key", "subject_id", "predicate", "-id"], name="receipt_fact"),
            models.Index(fields=["tenant", "memory_id"], name="receipt_memory"),
            models.Index(fields=["reader"], name="receipt_reader"),
        ]

    def __str__(self) -> str:
        return f"receipt {self.sequence} of tenant {self.tenant_id}: {self.subject_id} · {self.predicate}"
