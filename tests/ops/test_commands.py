"""Management commands: create_principal and seed_demo."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from memory_admin.accounts.models import Principal
from memory_admin.derived.models import Invalidation, ScheduledAction, Summary
from memory_admin.memory.models import Dispute, MemoryRecord


def test_create_principal_prints_a_working_token_on_its_last_line(db):
    out = StringIO()
    call_command("create_principal", "--tenant", "initech", "--name", "bot-1", "--role", "agent", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    principal = Principal.objects.get(username="bot-1@initech")
    assert principal.kind == "agent" and principal.roles == ["agent"]
    assert not principal.has_usable_password()
    assert token not in {t.key_hash for t in principal.tokens.all()}  # stored hashed only
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/records/").status_code == 200


def test_create_principal_sets_a_password_and_several_roles_for_a_human(db):
    call_command(
        "create_principal",
        "--tenant",
        "initech",
        "--name",
        "peter",
        "--role",
        "owner",
        "--role",
        "compliance",
        "--password",
        "tangerine-orbit-42",
        stdout=StringIO(),
    )
    peter = Principal.objects.get(username="peter@initech")
    assert peter.kind == "human" and sorted(peter.roles) == ["compliance", "owner"]
    assert peter.check_password("tangerine-orbit-42")


def test_create_principal_refuses_a_bad_tenant_slug(db):
    with pytest.raises(CommandError):
        call_command("create_principal", "--tenant", "Not A Slug", "--name", "x", "--role", "agent", stdout=StringIO())


def test_seed_demo_builds_the_story_and_is_idempotent(db):
    call_command("seed_demo", "--subjects", "20", stdout=StringIO())
    first = MemoryRecord.objects.count()
    call_command("seed_demo", "--subjects", "20", stdout=StringIO())
    assert MemoryRecord.objects.count() == first
    deadline = MemoryRecord.objects.get(memory_id="mem-deadline-002")
    assert deadline.value == "2026-11-02T17:00:00+09:00" and deadline.status == "accepted"
    assert MemoryRecord.objects.get(memory_id="mem-deadline-001").status == "superseded"
    late = MemoryRecord.objects.select_related("superseded_by").get(memory_id="mem-deadline-late-import")
    # History where r17 covers it; the valid time before r17's it answers as of (rule 3).
    assert late.status == "superseded" and late.superseded_by.memory_id == "mem-deadline-001"
    assert late.valid_to == late.superseded_by.valid_from
    assert MemoryRecord.objects.get(memory_id="mem-send-revoked").value == "revoked"
    assert Dispute.objects.filter(subject_id="product-x", status="open").count() == 1
    assert {"meeting_room", "meeting_time"} <= set(
        MemoryRecord.objects.filter(subject_id="person-sato").values_list("predicate", flat=True)
    )
    assert MemoryRecord.objects.filter(project__key__in=["project-b", "project-c", "project-d"]).count() >= 40
    # The copies made from Oct 30 learnt that it moved.
    assert next(s for s in Summary.objects.all() if s.text.startswith("Proposal 017")).status == "stale"
    assert ScheduledAction.objects.get(kind="send_reminder").status == "suspended"
    assert Invalidation.objects.filter(memory_id="mem-deadline-001", acknowledged_at__isnull=True).count() == 1
