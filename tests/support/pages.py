"""Helpers for tests of the dashboard's pages on Django's test client."""

from __future__ import annotations

from typing import Any

from django.test import Client


def signed_in(principal: Any) -> Client:
    """A test client signed in as `principal`."""
    client = Client()
    client.force_login(principal)
    return client


# A field policy as the policy editor posts it: every field filled as an admin would.
POLICY_FORM = {
    "project_id": "",
    "predicate": "send_permission",
    "authorized_issuers": "ada, olivia",
    "canonical_ref_prefix": "iam:",
    "connector": "http_json",
    "url_template": "http://127.0.0.1:9/{subject_id}",
    "value_pointer": "/value",
    "revision_pointer": "/rev",
    "timeout_seconds": "2",
    # The editor's number-and-unit control (dashboard/forms.py, DurationInUnitsField).
    "recheck_interval_amount": "6",
    "recheck_interval_unit": "hours",
    "recheck_before_action": "on",
    "on_failure": "block_action",
    "risk": "high",
    "retention_days": "",
}
