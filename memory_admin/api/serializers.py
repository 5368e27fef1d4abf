"""Request parsing and response shapes of the API. Rules live in the domain modules, not here; the record shape
every door shares (fact bodies, records, fact answers) is in memory_admin/shapes and imported from there."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework import serializers

from memory_admin.lib.schema import NON_BLANK_TEXT
from memory_admin.memory import validation
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.shapes import record_payload as record_payload
from memory_admin.memory.shapes import source_payload as source_payload
from memory_admin.shapes.fields import AwareDateTimeField as AwareDateTimeField
from memory_admin.shapes.fields import IdentifierField as IdentifierField
from memory_admin.shapes.fields import IsoDateTimeField as IsoDateTimeField
from memory_admin.shapes.fields import ISODurationField as ISODurationField
from memory_admin.shapes.fields import PrincipalNameField
from memory_admin.shapes.records import REVISION_MAX as REVISION_MAX
from memory_admin.shapes.records import SESSION_ID_MAX_LENGTH as SESSION_ID_MAX_LENGTH
from memory_admin.shapes.records import AssertFactSerializer as AssertFactSerializer
from memory_admin.shapes.records import AssertResultSerializer as AssertResultSerializer
from memory_admin.shapes.records import CandidateSerializer as CandidateSerializer
from memory_admin.shapes.records import ContextLoadRefSerializer as ContextLoadRefSerializer
from memory_admin.shapes.records import ContextOnReadSerializer as ContextOnReadSerializer
from memory_admin.shapes.records import DerivedFromSerializer as DerivedFromSerializer
from memory_admin.shapes.records import DisputeSerializer as DisputeSerializer
from memory_admin.shapes.records import FactQuerySerializer as FactQuerySerializer
from memory_admin.shapes.records import FactSerializer as FactSerializer
from memory_admin.shapes.records import RecordSerializer as RecordSerializer
from memory_admin.shapes.records import SourceInSerializer as SourceInSerializer
from memory_admin.shapes.records import SourceOutSerializer as SourceOutSerializer
from memory_admin.shapes.records import candidate_payload as candidate_payload
from memory_admin.shapes.records import dispute_payload as dispute_payload
from memory_admin.shapes.records import fact_payload as fact_payload


class RecordHistorySerializer(serializers.Serializer):
    """Answer of `GET /records/{memory_id}/history/`: every version, oldest revision first."""

    memory_id = serializers.CharField()
    results = RecordSerializer(many=True)


def _only(value: Any) -> dict[str, Any]:
    """A schema admitting `value` alone, inside `oneOf` branches (wrapped, so drf-spectacular's enum hook leaves it
    in place instead of merging the branches' enums into one component)."""
    return {"allOf": [{"enum": [value]}]}


# A reason the action requires: blank is refused by the domain, with its message; the schema says so.
REQUIRED_REASON = {"minLength": 1, "pattern": NON_BLANK_TEXT}


class ReasonSerializer(serializers.Serializer):
    schema_properties: ClassVar[dict[str, Any]] = {"reason": REQUIRED_REASON}

    reason = serializers.CharField(max_length=2000, allow_blank=True)


class ExpireSerializer(ReasonSerializer):
    valid_to = AwareDateTimeField(required=False, allow_null=True)


class RecordListQuerySerializer(serializers.Serializer):
    project_id = IdentifierField("project_id", required=False)
    subject_id = IdentifierField("subject_id", required=False)
    predicate = IdentifierField("predicate", required=False)
    status = serializers.ChoiceField(required=False, choices=MemoryRecord.Status.choices)
    valid_at = AwareDateTimeField(required=False)
    known_at = AwareDateTimeField(required=False)


class ResolveDisputeSerializer(serializers.Serializer):
    """A winner, or `exclude_all` (not both), and the reason."""

    schema_properties: ClassVar[dict[str, Any]] = {"reason": REQUIRED_REASON}
    schema_extra: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {"required": ["winner"], "properties": {"winner": REQUIRED_REASON, "exclude_all": _only(False)}},
            {
                "required": ["exclude_all"],
                "properties": {"exclude_all": _only(True), "reason": {}},
                "additionalProperties": False,
            },
        ]
    }

    winner = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=64)
    exclude_all = serializers.BooleanField(default=False)
    reason = serializers.CharField(max_length=2000, allow_blank=True)


class FieldPolicySerializer(serializers.ModelSerializer):
    """Field policies as the API shows them: `project_id` null means every project of the tenant."""

    # The schema promises the sources every policy may name: none, or the manual one. An `http_json` source
    # ({"connector": "http_json", "url_template", "value_pointer", "revision_pointer", "timeout_seconds", ...}) is
    # accepted too, when its URL is one this server may fetch, which a schema cannot tell.
    schema_properties: ClassVar[dict[str, Any]] = {
        "canonical_source": {
            "nullable": True,
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"connector": {"enum": ["manual"]}},
                    "required": ["connector"],
                    "additionalProperties": False,
                }
            ],
            "description": 'null, {"connector": "manual"}, or an http_json source whose URL this server may fetch '
            "(docs/canonical-sources.md).",
        }
    }

    id = serializers.IntegerField(read_only=True)
    project_id = IdentifierField("project_id", source="project.key", allow_null=True, required=False)
    predicate = IdentifierField("predicate")
    authorized_issuers = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, max_length=200
    )
    canonical_source = serializers.JSONField(required=False, allow_null=True)
    recheck_interval = ISODurationField(required=False, allow_null=True)

    class Meta:
        model = FieldPolicy
        fields = [
            "id",
            "project_id",
            "predicate",
            "authorized_issuers",
            "canonical_ref_prefix",
            "canonical_source",
            "recheck_interval",
            "recheck_before_action",
            "on_failure",
            "risk",
            "retention_days",
            "agents_expire_own",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]
        # Added to today's date on every write: a bound keeps the sum a date Python can hold.
        extra_kwargs = {"retention_days": {"min_value": 1, "max_value": validation.MAX_RETENTION_DAYS}}


class FieldPolicyInSerializer(FieldPolicySerializer):
    """A field policy as a client sends it (the schema's request component: what a write accepts is described
    apart from what an answer shows, as the source and the interval's form differ)."""

    class Meta(FieldPolicySerializer.Meta):
        ref_name = "FieldPolicyIn"


class RecheckReportSerializer(serializers.Serializer):
    """Body of `POST /records/{memory_id}/rechecks/`: a changed value comes with the value observed; an unchanged
    one names none (it is the record's)."""

    schema_extra: ClassVar[dict[str, Any]] = {
        "oneOf": [
            {
                "required": ["outcome", "observed_value"],
                "properties": {
                    "outcome": _only(RecheckAttempt.Result.VERIFIED_CHANGED.value),
                    "observed_value": {
                        "anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean")]
                    },
                },
            },
            {
                "properties": {
                    "outcome": _only(RecheckAttempt.Result.VERIFIED_UNCHANGED.value),
                    **{name: {} for name in ("source_revision", "source_ref", "error")},
                },
                "additionalProperties": False,
            },
            {
                "properties": {
                    "outcome": {
                        "allOf": [
                            {
                                "enum": [
                                    r
                                    for r in RecheckAttempt.Result.values
                                    if r
                                    not in (
                                        RecheckAttempt.Result.VERIFIED_CHANGED,
                                        RecheckAttempt.Result.VERIFIED_UNCHANGED,
                                    )
                                ]
                            }
                        ]
                    }
                }
            },
        ]
    }

    outcome = serializers.ChoiceField(choices=RecheckAttempt.Result.choices)
    observed_value = serializers.JSONField(required=False, allow_null=True)
    source_revision = serializers.CharField(required=False, allow_blank=True, max_length=100, default="")
    source_ref = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    error = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class RecheckAttemptSerializer(serializers.Serializer):
    """One recheck attempt of a record."""

    id = serializers.IntegerField(source="pk")
    memory_id = serializers.CharField(source="record.memory_id")
    outcome = serializers.ChoiceField(choices=RecheckAttempt.Result.choices)
    trigger = serializers.ChoiceField(choices=RecheckAttempt.Trigger.choices)
    observed_value = serializers.JSONField(allow_null=True)
    source_revision = serializers.CharField()
    source_ref = serializers.CharField()
    duration_ms = serializers.IntegerField()
    error = serializers.CharField()
    reporter = PrincipalNameField(allow_null=True)
    new_memory_id = serializers.CharField(source="new_record.memory_id", allow_null=True)
    attempted_at = IsoDateTimeField()


class RecheckListSerializer(serializers.Serializer):
    """Answer of `GET /records/{memory_id}/rechecks/`: the record's attempts, newest first (at most 200)."""

    memory_id = serializers.CharField()
    results = RecheckAttemptSerializer(many=True)


class SourceTestSerializer(serializers.Serializer):
    subject_id = IdentifierField("subject_id")
    project_id = IdentifierField("project_id", required=False)


class SourceTestResultSerializer(serializers.Serializer):
    """Answer of `POST /field-policies/{id}/test/` (rechecks.test_source): what a recheck would conclude
    now. Only `outcome` and `detail` are always present; the rest depend on what the source answered."""

    outcome = serializers.CharField()
    detail = serializers.CharField()
    observed_value = serializers.JSONField(required=False, allow_null=True)
    source_revision = serializers.CharField(required=False)
    url = serializers.CharField(required=False)
    duration_ms = serializers.IntegerField(required=False)
    current_value = serializers.JSONField(required=False, allow_null=True)
    candidates = serializers.JSONField(required=False, allow_null=True)

    def to_representation(self, instance: dict[str, Any]) -> dict[str, Any]:
        return instance
