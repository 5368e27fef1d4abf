"""The record format of PRODUCT.md as serializers: a fact's body (`AssertFactSerializer`, with the flat source
names as an alias), a record, a fact answer, and the read's query. `memory.shapes.record_payload` renders a record;
these describe it for the schema and parse what comes in."""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from memory_admin.memory.models import Dispute, MemoryRecord
from memory_admin.memory.reads import FRESHNESS, FactView
from memory_admin.memory.shapes import record_payload, source_payload
from memory_admin.shapes.fields import (
    AwareDateTimeField,
    IdentifierField,
    IsoDateTimeField,
    OmitWhenAbsentMixin,
    PrincipalNameField,
)
from memory_admin.shapes.fields import iso as _iso


class IssuerField(serializers.CharField):
    """The principal that wrote a record, by name (else username): from the columns `payload_columns` adds when
    the record was read with them, else through its relation."""

    def get_attribute(self, instance: MemoryRecord) -> str:
        row = instance.__dict__
        if "payload_issuer_username" in row:
            return str(row["payload_issuer_name"] or row["payload_issuer_username"])
        return str(instance.issuer.name or instance.issuer.username)


class LinkedCharField(serializers.CharField):
    """A value of another row (`source`, through a relation), or the column `column` a query added to the row
    for it (memory.shapes.payload_columns): the same text either way."""

    def __init__(self, column: str, **kwargs: Any) -> None:
        self.column = column
        super().__init__(**kwargs)

    def get_attribute(self, instance: Any) -> Any:
        row = instance.__dict__
        return row[self.column] if self.column in row else super().get_attribute(instance)


class SupersedesField(serializers.ListField):
    """The `memory_id`s of the records a record superseded, oldest first (the column `payload_columns` adds,
    else its relation)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(), **kwargs)

    def get_attribute(self, instance: MemoryRecord) -> list[str]:
        row = instance.__dict__
        if "payload_supersedes" in row:
            return row["payload_supersedes"]
        return [older.memory_id for older in instance.supersedes.all()]


class SourceOutSerializer(serializers.Serializer):
    """Where a record's value came from."""

    # Read from the record itself (`source="*"` where it is nested); the issuer is the authenticated principal.

    canonical_ref = serializers.CharField(source="source_canonical_ref")
    revision = serializers.CharField(source="source_revision")
    issuer_principal_id = IssuerField(source="*")
    event_ids = serializers.ListField(child=serializers.CharField(), source="source_event_ids")


class RecordSerializer(serializers.Serializer):
    """One record in the format of PRODUCT.md: the schema of every answer carrying a record."""

    # The declared fields are the record's shape. Rendered by the hand-built memory.shapes.record_payload (which
    # exports and error answers share): bench/serializers.py shows it pays on the record list and as-of
    # (docs/hand-built-rows.md); tests/api/test_hand_built_rows.py holds the two to the same output.

    memory_id = serializers.CharField()
    project_id = LinkedCharField("payload_project_key", source="project.key")
    subject_id = serializers.CharField()
    predicate = serializers.CharField()
    value = serializers.JSONField()
    status = serializers.ChoiceField(choices=MemoryRecord.Status.choices)
    valid_from = IsoDateTimeField()
    valid_to = IsoDateTimeField(allow_null=True)
    recorded_from = IsoDateTimeField()
    recorded_to = IsoDateTimeField(allow_null=True)
    last_verified_at = IsoDateTimeField(allow_null=True)
    recheck_after = IsoDateTimeField(allow_null=True)
    retain_until = IsoDateTimeField(allow_null=True)
    revision = serializers.IntegerField()
    source = SourceOutSerializer(source="*")  # type: ignore[assignment]
    supersedes = SupersedesField(source="*")
    superseded_by = LinkedCharField("payload_superseded_by", source="superseded_by.memory_id", allow_null=True)
    derived_from = serializers.JSONField()
    status_reason = serializers.CharField()

    def to_representation(self, instance: MemoryRecord) -> dict[str, Any]:
        return record_payload(instance)


class SourceInSerializer(serializers.Serializer):
    canonical_ref = serializers.CharField(max_length=500)
    revision = serializers.CharField(max_length=100)
    event_ids = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=200)


# Revisions are stored in PostgreSQL `integer` columns: a larger number would overflow the query (a 500).
REVISION_MAX = 2**31 - 1


class DerivedFromSerializer(serializers.Serializer):
    memory_id = serializers.CharField(max_length=64)
    revision = serializers.IntegerField(min_value=1, max_value=REVISION_MAX)


_SOURCE_REQUIRED = "This field is required: source {canonical_ref, revision} (or source_ref and source_revision)."
_SOURCE_TWICE = "Give the source once: source {canonical_ref, revision}, or source_ref and source_revision, not both."


class AssertFactSerializer(serializers.Serializer):
    """Body of `POST /records/` (and of each batch item and import line). The issuer is the authenticated principal,
    never a body field. The source is `source: {canonical_ref, revision}` or, as the client and MCP name it, flat
    `source_ref` and `source_revision` (one of the two forms, not both). `valid_from` defaults to the time of the
    request (the answer's record states it)."""

    # One form of the source, as `validate` reads it (the OpenAPI schema says so: memory_admin.lib.schema).
    schema_extra: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {
                "required": ["source"],
                "not": {"anyOf": [{"required": ["source_ref"]}, {"required": ["source_revision"]}]},
            },
            {"required": ["source_ref", "source_revision"], "not": {"required": ["source"]}},
        ]
    }

    project_id = IdentifierField("project_id")
    subject_id = IdentifierField("subject_id")
    predicate = IdentifierField("predicate")
    value = serializers.JSONField()
    valid_from = AwareDateTimeField(required=False, help_text="From when the value holds; default: now.")
    valid_to = AwareDateTimeField(required=False, allow_null=True)
    source = SourceInSerializer(required=False)  # type: ignore[assignment]
    source_ref = serializers.CharField(
        max_length=500, required=False, help_text="The same as source.canonical_ref (give one form of the source)."
    )
    source_revision = serializers.CharField(
        max_length=100, required=False, help_text="The same as source.revision (give one form of the source)."
    )
    expected_revision = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=REVISION_MAX)
    derived_from = DerivedFromSerializer(many=True, required=False)

    def to_internal_value(self, data: Any) -> Any:
        """The fields' own checks, with the source's absence in the same answer: a body missing several fields hears
        of all of them at once, the source included (`validate` runs only once every field passed)."""
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if isinstance(exc.detail, dict) and isinstance(data, dict) and "source" not in exc.detail:
                if "source" not in data and not {"source_ref", "source_revision"} & data.keys():
                    exc.detail["source"] = [serializers.ErrorDetail(_SOURCE_REQUIRED, code="required")]
            raise

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        flat = {name: attrs.pop(name) for name in ("source_ref", "source_revision") if name in attrs}
        if "source" in attrs:
            if flat:
                raise serializers.ValidationError({"source": [_SOURCE_TWICE]})
            return attrs
        if not flat:
            raise serializers.ValidationError({"source": [_SOURCE_REQUIRED]})
        missing = {
            name: ["Required with the other flat source field."]
            for name in ("source_ref", "source_revision")
            if name not in flat
        }
        if missing:
            raise serializers.ValidationError(missing)
        attrs["source"] = {"canonical_ref": flat["source_ref"], "revision": flat["source_revision"]}
        return attrs


class AssertResultSerializer(RecordSerializer):
    """Answer of `POST /records/`: the record, what the write did, and the dispute it opened if any.
    Rendered from an `actions.AssertResult` (its record re-read with its public relations)."""

    outcome = serializers.ChoiceField(
        choices=["created", "history", "unchanged", "disputed"],
        help_text=(
            "created (201): the value answers now or from its valid_from on, including an older revision arriving"
            " late for valid time no newer revision covers (its valid_to is then cut where the newer one takes"
            " over; the fact's head, the revision expected_revision is compared with, stays the newer one);"
            " history (200): kept as history, answering at most as of a past stretch nothing newer covers;"
            " unchanged (200): an idempotent repeat; disputed (202): both values kept until an owner resolves it."
        ),
    )
    dispute_id = serializers.CharField(required=False)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        record, result = instance
        payload = record_payload(record)
        payload["outcome"] = result.outcome.value
        if result.dispute is not None:
            payload["dispute_id"] = result.dispute.public_id
        return payload


SESSION_ID_MAX_LENGTH = 200  # a context load's session_id, on `POST /context-loads/` and on a read


class ContextOnReadSerializer(serializers.Serializer):
    """Optional on a read: register what the answer gives as usable as one context load of the caller, in
    the same request and by the rule of `POST /context-loads/` (the answer's `context_load` names it)."""

    session_id = serializers.CharField(max_length=SESSION_ID_MAX_LENGTH, required=False)
    context_expires_at = AwareDateTimeField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A query string's empty value would read as "not given"; as on `POST /context-loads/`, it is refused.
        if "session_id" in self.initial_data and not attrs.get("session_id"):
            raise serializers.ValidationError({"session_id": ["This field may not be blank."]})
        return attrs


class ContextLoadRefSerializer(OmitWhenAbsentMixin, serializers.Serializer):
    """The context load a read registered (`context_load` of its answer); `GET /agents/{agent_id}/invalidations/`
    lists its notices."""

    # Absent from an answer whose read named no session_id (OmitWhenAbsentMixin: the view adds it).
    id = serializers.CharField()
    agent_id = serializers.CharField()
    session_id = serializers.CharField()
    expires_at = serializers.DateTimeField()


class FactQuerySerializer(ContextOnReadSerializer):
    project_id = IdentifierField("project_id")
    subject_id = IdentifierField("subject_id")
    predicate = IdentifierField("predicate")
    purpose = serializers.ChoiceField(choices=["answer", "action"], default="answer")
    valid_at = AwareDateTimeField(required=False)
    known_at = AwareDateTimeField(required=False)


def candidate_payload(record: MemoryRecord) -> dict[str, Any]:
    return {
        "memory_id": record.memory_id,
        "value": record.value,
        "revision": record.revision,
        "valid_from": _iso(record.valid_from),
        "recorded_from": _iso(record.recorded_from),
        "source": source_payload(record),
    }


def fact_payload(view: FactView, project_id: str, subject_id: str, predicate: str) -> dict[str, Any]:
    """The hand-built row of FactSerializer (facts/current, a hot path: docs/hand-built-rows.md)."""
    record = view.record
    return {
        "project_id": project_id,
        "subject_id": subject_id,
        "predicate": predicate,
        "value": record.value if record else None,
        "memory_id": record.memory_id if record else None,
        "status": view.status,
        "revision": record.revision if record else None,
        "freshness": view.freshness,
        "last_verified_at": _iso(view.last_verified_at),
        "last_verified_value": view.last_verified_value,
        "recheck_after": _iso(record.recheck_after) if record else None,
        "valid_from": _iso(record.valid_from) if record else None,
        "valid_to": _iso(record.valid_to) if record else None,
        "source": source_payload(record) if record else None,
        "caveat": view.caveat,
        "action_allowed": view.action_allowed,
        "candidates": [candidate_payload(c) for c in view.candidates],
        "dispute_id": view.dispute.public_id if view.dispute else None,
    }


class CandidateSerializer(serializers.Serializer):
    """One of the disagreeing values of a disputed fact (rendered by candidate_payload)."""

    memory_id = serializers.CharField()
    value = serializers.JSONField()
    revision = serializers.IntegerField()
    valid_from = IsoDateTimeField()
    recorded_from = IsoDateTimeField()
    source = SourceOutSerializer(source="*")  # type: ignore[assignment]


class AskedKeyField(serializers.CharField):
    """One part of the fact key the read asked for (the serializer's context `key`), as the client sent it."""

    def __init__(self, index: int, **kwargs: Any) -> None:
        self.index = index
        super().__init__(source="*", **kwargs)

    def get_attribute(self, instance: Any) -> str:
        return str(self.context["key"][self.index])


@extend_schema_serializer(many=False)  # one object, though served by a `list` route
class FactSerializer(serializers.Serializer):
    """Answer of `GET /facts/current/`, rendered from a `reads.FactView` and the asked key in the context
    (`{"key": (project_id, subject_id, predicate)}`)."""

    # Rendered by the hand-built fact_payload: bench/serializers.py shows it pays on facts/current
    # (docs/hand-built-rows.md); tests/api/test_hand_built_rows.py holds the two to the same output.

    project_id = AskedKeyField(0)
    subject_id = AskedKeyField(1)
    predicate = AskedKeyField(2)
    value = serializers.JSONField(source="record.value", allow_null=True)
    memory_id = serializers.CharField(source="record.memory_id", allow_null=True)
    status = serializers.CharField()
    revision = serializers.IntegerField(source="record.revision", allow_null=True)
    freshness = serializers.ChoiceField(choices=list(FRESHNESS), allow_null=True)
    last_verified_at = IsoDateTimeField(allow_null=True)
    last_verified_value = serializers.JSONField(allow_null=True)
    recheck_after = IsoDateTimeField(source="record.recheck_after", allow_null=True)
    valid_from = IsoDateTimeField(source="record.valid_from", allow_null=True)
    valid_to = IsoDateTimeField(source="record.valid_to", allow_null=True)
    source = SourceOutSerializer(source="record", allow_null=True)  # type: ignore[assignment]
    caveat = serializers.CharField(allow_null=True)
    action_allowed = serializers.BooleanField()
    candidates = CandidateSerializer(many=True)
    dispute_id = serializers.CharField(source="dispute.public_id", allow_null=True)
    # Set by `GET /facts/current/?session_id=...`: the context load registered for this answer (null when
    # nothing usable was returned, absent without session_id).
    context_load = ContextLoadRefSerializer(allow_null=True, required=False)
    # Set on every read for acting (`purpose=action`): the signed decision receipt of this answer
    # (`GET /receipts/{id}/`); a refusal's 409 carries it too. Absent otherwise.
    receipt_id = serializers.CharField(required=False)

    def to_representation(self, instance: FactView) -> dict[str, Any]:
        return fact_payload(instance, *self.context["key"])


class DisputeSerializer(serializers.Serializer):
    """One dispute: the fact key, its state and the disagreeing values."""

    # The API's disputes and MCP `list_disputes` (dispute_payload).

    id = serializers.CharField(source="public_id")
    project_id = serializers.CharField(source="project.key")
    subject_id = serializers.CharField()
    predicate = serializers.CharField()
    status = serializers.ChoiceField(choices=Dispute.Status.choices)
    opened_at = IsoDateTimeField()
    resolved_at = IsoDateTimeField(allow_null=True)
    resolved_by = PrincipalNameField(allow_null=True)
    winner = serializers.CharField(source="winner.memory_id", allow_null=True)
    reason = serializers.CharField(source="resolution_reason")
    candidates = CandidateSerializer(source="candidates.all", many=True)


def dispute_payload(dispute: Dispute) -> dict[str, Any]:
    return DisputeSerializer(dispute).data
