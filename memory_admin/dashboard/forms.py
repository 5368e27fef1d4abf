"""Dashboard forms: they parse and validate input; the rules stay in the domain modules."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.utils import timezone


class LocalDateTimeField(forms.CharField):
    """A datetime typed in the page: ISO with an offset, or a local time in the tenant's time zone."""

    default_error_messages = {"invalid": "Enter a date and time such as 2026-10-21 12:00 (or ISO 8601 with an offset)."}

    def to_python(self, value: Any) -> datetime | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        if len(text) == 10:  # a bare date means its start
            text += "T00:00"
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None
        if timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, timezone.get_current_timezone())
        return parsed


STATUS_VIEWS = [
    ("accepted", "Current"),
    ("superseded", "Superseded (history)"),
    ("disputed", "Disputed"),
    ("excluded", "Excluded"),
    ("expired", "Expired"),
    ("all", "All statuses"),
]


class RecordFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search subject, predicate or value")
    project = forms.CharField(required=False, max_length=100)
    subject = forms.CharField(required=False, max_length=200)
    predicate = forms.CharField(required=False, max_length=200)
    status = forms.ChoiceField(required=False, choices=STATUS_VIEWS)
    freshness = forms.ChoiceField(
        required=False,
        choices=[("", "Any freshness"), ("fresh", "Fresh"), ("recheck_due", "Recheck due"),
                 ("never_verified", "Never verified")],
    )  # fmt: skip
    source = forms.CharField(required=False, max_length=500, label="Source starts with")
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    size = forms.IntegerField(required=False, min_value=1, max_value=200, widget=forms.HiddenInput)


class AsOfForm(forms.Form):
    valid_at = LocalDateTimeField(required=False, label="Valid at (what held then)")
    known_at = LocalDateTimeField(required=False, label="Known at (what we believed then)")


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000, strip=True, error_messages={"required": "Give a reason; it is audited."})


class BulkForm(forms.Form):
    operation = forms.ChoiceField(choices=[("exclude", "Exclude from context"), ("expire", "Expire, keep as history")])
    reason = forms.CharField(required=False, max_length=2000, strip=True)
    confirm = forms.BooleanField(required=False)


class ResolveForm(forms.Form):
    winner = forms.CharField(required=False, max_length=64)
    reason = forms.CharField(max_length=2000, strip=True, error_messages={"required": "Give a reason; it is audited."})


AUDIT_ACTIONS = [
    "record.asserted.created",
    "record.asserted.history",
    "record.asserted.disputed",
    "record.superseded",
    "record.disputed",
    "record.excluded",
    "record.expired",
    "record.dispute_resolved",
    "dispute.opened",
    "dispute.resolved",
    "policy.created",
    "policy.updated",
    "policy.deleted",
]


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.ChoiceField(required=False, choices=[("", "Any action")] + [(a, a) for a in AUDIT_ACTIONS])
    object = forms.CharField(required=False, max_length=64, label="Object id")
    since = LocalDateTimeField(required=False, label="From")
    until = LocalDateTimeField(required=False, label="To")
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
