"""The article's story as demo data, built through the same domain functions as every other write.

A door (used by `manage.py seed_demo` and tests): it writes through memory and derived
alike, so it sits above both, outside the domain packages.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import ApiToken, Principal, Role, Tenant
from memory_admin.accounts.services import ensure_principal
from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.memory import actions, tokens
from memory_admin.memory.actions import Assertion
from memory_admin.memory.models import FieldPolicy, MemoryRecord
from memory_admin.memory.policies import save_field_policy

TENANT = "demo"
PASSWORD = "demo"
JST = timezone.get_fixed_timezone(9 * 60)


def at(month: int, day: int, hour: int = 9, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, second, tzinfo=JST)


def _principals() -> dict[str, Principal]:
    people = {
        "owner": [Role.OWNER],
        "compliance": [Role.COMPLIANCE],
        "admin": [Role.ADMIN, Role.OWNER],
    }
    agents = {
        "agent": [Role.AGENT],
        "task-system": [Role.AGENT],
        "price-feed-a": [Role.AGENT],
        "price-feed-b": [Role.AGENT],
    }
    # The demo's password is documented and weak on purpose: the one place that bypasses the validators.
    found = {
        name: ensure_principal(TENANT, name, roles, password=PASSWORD, validate=False) for name, roles in people.items()
    }
    Tenant.objects.filter(slug=TENANT).update(name="Demo (the article's story)", time_zone="Asia/Tokyo")
    found |= {name: ensure_principal(TENANT, name, roles) for name, roles in agents.items()}
    return found


def _policies(admin: Principal) -> None:
    wanted: list[dict[str, Any]] = [
        {
            "project_id": None,
            "predicate": "submission_deadline",
            "authorized_issuers": ["owner", "task-system"],
            "canonical_ref_prefix": "task-system:",
            # A person verifies in the dashboard; the task system's own agent speaks for it over the API.
            "canonical_source": {"connector": "manual", "reporters": ["task-system"]},
            "recheck_interval": timedelta(days=1),
            "recheck_before_action": True,
            "on_failure": FieldPolicy.OnFailure.BLOCK_ACTION,
            "risk": FieldPolicy.Risk.HIGH,
        },
        {
            "project_id": None,
            "predicate": "send_permission",
            "authorized_issuers": ["admin"],
            "canonical_ref_prefix": "iam:",
            "recheck_interval": timedelta(hours=6),
            "recheck_before_action": True,
            "on_failure": FieldPolicy.OnFailure.BLOCK_ACTION,
            "risk": FieldPolicy.Risk.HIGH,
        },
        {
            "project_id": None,
            "predicate": "unit_price",
            "recheck_interval": timedelta(days=7),
            "on_failure": FieldPolicy.OnFailure.ANSWER_WITH_CAVEAT,
            "retention_days": 365,
        },
    ]
    for data in wanted:
        existing = FieldPolicy.objects.filter(
            tenant_id=admin.tenant_pk, project__isnull=True, predicate=data["predicate"]
        ).first()
        if existing is None:
            save_field_policy(admin, dict(data))


def _story(p: dict[str, Principal]) -> None:
    """Each case of PRODUCT.md's conformance design that lives in stored facts."""
    assert_ = actions.assert_fact
    # (1) The proposal deadline: Oct 30 17:00 told on Oct 20 (r17), moved to Nov 2 on Oct 22 (r18).
    ref = "task-system:project-a/task-proposal-017"
    deadline: dict[str, Any] = {
        "project_id": "project-a",
        "subject_id": "task-proposal-017",
        "predicate": "submission_deadline",
    }
    assert_(
        p["task-system"],
        Assertion(
            **deadline,
            value="2026-10-30T17:00:00+09:00",
            valid_from=at(10, 20),
            source_canonical_ref=ref,
            source_revision="r17",
        ),
        now=at(10, 20, 9, 0, 5),
        verified_at=at(10, 20, 9, 5),
        memory_id="mem-deadline-001",
    )
    # Copies made from the Oct 30 value before it moved (rule 10): a summary, a reminder plan, and
    # another agent's loaded context. Moving the deadline makes them stale, suspended and notified.
    oct30 = [BaseRef("mem-deadline-001", 1)]
    lineage.create_summary(
        p["agent"], project_id="project-a", text="Proposal 017 is due Oct 30 17:00 (JST).", bases=oct30
    )
    lineage.schedule_action(
        p["agent"],
        project_id="project-a",
        kind="send_reminder",
        due_at=at(10, 29, 9),
        payload={"to": "proposal-team", "text": "Proposal due tomorrow"},
        bases=oct30,
    )
    lineage.register_context_load(
        p["agent"], session_id="planning-session-4", bases=oct30, expires_at=timezone.now() + timedelta(days=30)
    )
    assert_(
        p["task-system"],
        Assertion(
            **deadline,
            value="2026-11-02T17:00:00+09:00",
            valid_from=at(10, 22),
            source_canonical_ref=ref,
            source_revision="r18",
            expected_revision=1,
        ),
        now=at(10, 22, 9, 0, 5),
        verified_at=at(10, 22, 9, 5),
        memory_id="mem-deadline-002",
    )
    # (2) An older document imported after the newer one: history where r17 and r18 cover its valid time; it
    # answers only as of before Oct 20, which nothing newer covers (rule 3).
    assert_(
        p["task-system"],
        Assertion(
            **deadline,
            value="2026-10-28T17:00:00+09:00",
            valid_from=at(10, 18),
            source_canonical_ref=ref,
            source_revision="r16",
        ),
        now=at(10, 23, 11),
        memory_id="mem-deadline-late-import",
    )
    # (4) Two facts about Sato that must not be merged: the meeting room and the meeting time.
    sato: dict[str, Any] = {"project_id": "project-a", "subject_id": "person-sato"}
    assert_(
        p["agent"],
        Assertion(
            **sato,
            predicate="meeting_room",
            value="Room 4B",
            valid_from=at(10, 21),
            source_canonical_ref="chat:session-88/msg-12",
            source_revision="1",
        ),
        now=at(10, 21, 15),
        memory_id="mem-sato-room",
    )
    assert_(
        p["agent"],
        Assertion(
            **sato,
            predicate="meeting_time",
            value="2026-10-28T14:00:00+09:00",
            valid_from=at(10, 21),
            source_canonical_ref="chat:session-88/msg-14",
            source_revision="1",
        ),
        now=at(10, 21, 15, 2),
        memory_id="mem-sato-time",
    )
    # (5) A send permission granted, then revoked.
    send: dict[str, Any] = {
        "project_id": "project-a",
        "subject_id": "agent-mailer",
        "predicate": "send_permission",
    }
    assert_(
        p["admin"],
        Assertion(
            **send, value="allowed", valid_from=at(10, 15), source_canonical_ref="iam:agent-mailer", source_revision="7"
        ),
        now=at(10, 15, 10),
        verified_at=at(10, 15, 10),
        memory_id="mem-send-granted",
    )
    assert_(
        p["admin"],
        Assertion(
            **send,
            value="revoked",
            valid_from=at(10, 25),
            source_canonical_ref="iam:agent-mailer",
            source_revision="8",
            expected_revision=1,
        ),
        now=at(10, 25, 10),
        verified_at=at(10, 25, 10),
        memory_id="mem-send-revoked",
    )
    # A price reported differently by two equal-rank sources: a dispute for an owner to resolve.
    price: dict[str, Any] = {
        "project_id": "project-a",
        "subject_id": "product-x",
        "predicate": "unit_price",
    }
    assert_(
        p["price-feed-a"],
        Assertion(
            **price,
            value={"amount": 1200, "currency": "JPY"},
            valid_from=at(10, 26),
            source_canonical_ref="vendor-site:product-x",
            source_revision="2026-10-26",
        ),
        now=at(10, 26, 8),
        memory_id="mem-price-vendor",
    )
    assert_(
        p["price-feed-b"],
        Assertion(
            **price,
            value={"amount": 1350, "currency": "JPY"},
            valid_from=at(10, 26),
            source_canonical_ref="partner-catalog:product-x",
            source_revision="v41",
        ),
        now=at(10, 26, 8, 30),
        memory_id="mem-price-partner",
    )
    # (3) A rule effective tomorrow: today's answer stays the old limit until then.
    limit: dict[str, Any] = {
        "project_id": "project-a",
        "subject_id": "expense-policy",
        "predicate": "approval_limit",
    }
    now = timezone.now()
    assert_(
        p["owner"],
        Assertion(
            **limit,
            value=50000,
            valid_from=at(4, 1),
            source_canonical_ref="handbook:expenses",
            source_revision="2026.1",
        ),
        now=at(4, 1, 9),
        memory_id="mem-limit-current",
    )
    assert_(
        p["owner"],
        Assertion(
            **limit,
            value=100000,
            valid_from=now + timedelta(days=1),
            source_canonical_ref="handbook:expenses",
            source_revision="2026.2",
            expected_revision=1,
        ),
        now=now,
        memory_id="mem-limit-tomorrow",
    )


SYNTHETIC_PREDICATES = [
    "status",
    "owner",
    "due_date",
    "budget",
    "priority",
    "contact_email",
    "location",
]


def _synthetic_subject(agent: Principal, i: int, rng: random.Random, base: datetime) -> int:
    """One synthetic subject: two of its predicates, some with a second version."""
    made = 0
    project = f"project-{'bcd'[i % 3]}"
    subject = f"item-{i:05d}"
    for predicate in rng.sample(SYNTHETIC_PREDICATES, 2):
        when = base + timedelta(minutes=rng.randrange(60 * 24 * 50))
        a = Assertion(
            project_id=project,
            subject_id=subject,
            predicate=predicate,
            value=f"{predicate}-{rng.randrange(1000)}",
            valid_from=when,
            source_canonical_ref=f"crm:{subject}",
            source_revision="1",
        )
        first = actions.assert_fact(agent, a, now=when, verified_at=when if rng.random() < 0.6 else None)
        made += 1
        if rng.random() < 0.3:
            later = when + timedelta(days=rng.randrange(1, 9))
            b = Assertion(
                project_id=project,
                subject_id=subject,
                predicate=predicate,
                value=f"{predicate}-{rng.randrange(1000)}",
                valid_from=later,
                source_canonical_ref=f"crm:{subject}",
                source_revision="2",
                expected_revision=first.record.revision,
            )
            actions.assert_fact(agent, b, now=later, verified_at=later)
            made += 1
    return made


# Subjects written per transaction: short enough that the web server's writes on SQLite (one writer at a time)
# wait a fraction of a second while the volume loads beside it.
VOLUME_CHUNK = 50


def volume_progress_key(tenant_id: int) -> str:
    return f"demo:volume:{tenant_id}"


def volume_progress(tenant_id: int) -> dict[str, int] | None:
    """How far the demo's synthetic volume has loaded ({"done", "total"} subjects), or None when none is loading
    (no demo, or a load that finished): what the overview shows while `make run` loads it in the background."""
    progress = cache.get(volume_progress_key(tenant_id))
    if not isinstance(progress, dict) or progress.get("done", 0) >= progress.get("total", 0):
        return None
    return {"done": int(progress["done"]), "total": int(progress["total"])}


def seed_volume(*, subjects: int = 1500, seed: int = 7, on_chunk: Any = None) -> int:
    """Volume for the pages: `subjects` subjects over three projects, some facts with two versions. Written in
    chunks of VOLUME_CHUNK subjects, one transaction each, so it can run beside the web server and resume where
    it stopped: a chunk with any of its subjects present is skipped. Each chunk's facts come from their own random
    stream (seed and chunk), so a resumed load writes what an uninterrupted one would have."""
    # The agent seed_story made (the volume loads after it); made here when the volume is loaded alone.
    agent = Principal.objects.filter(tenant__slug=TENANT, name="agent").first() or ensure_principal(
        TENANT, "agent", [Role.AGENT]
    )
    tenant_id = agent.tenant_pk
    key = volume_progress_key(tenant_id)
    base = timezone.now() - timedelta(days=60)
    made = 0
    for start in range(0, subjects, VOLUME_CHUNK):
        stop = min(start + VOLUME_CHUNK, subjects)
        # A chunk is written in one transaction: any of its subjects present means it was loaded (and a subject
        # deleted since is not written again).
        done_already = MemoryRecord.objects.filter(
            tenant_id=tenant_id, subject_id__in=[f"item-{i:05d}" for i in range(start, stop)]
        ).exists()
        if not done_already:
            rng = random.Random(f"{seed}:{start}")
            with transaction.atomic():
                for i in range(start, stop):
                    made += _synthetic_subject(agent, i, rng, base)
        cache.set(key, {"done": stop, "total": subjects}, timeout=24 * 3600)
        if on_chunk is not None:
            on_chunk(stop, subjects)
    return made


def seed_story() -> str:
    """The demo tenant's people, policies and the article's story, and a fresh agent token (returned). Running it
    again changes nothing but the token: the previous run's demo token stops working; both changes are audited
    like any token change."""
    with transaction.atomic():
        principals = _principals()
        _policies(principals["admin"])
        if not MemoryRecord.objects.filter(memory_id="mem-deadline-001").exists():
            _story(principals)
        for old in ApiToken.objects.filter(principal=principals["agent"], name="demo", revoked_at__isnull=True):
            tokens.revoke(old, actor=None, reason="seed_demo issued a new demo token")
        return tokens.issue(principals["agent"], name="demo", reason="seed_demo")[1]


def seed_demo(*, subjects: int = 1500, seed: int = 7) -> dict[str, Any]:
    """Build the demo tenant, story then volume; running it again changes nothing but the agent's fresh token."""
    token = seed_story()
    made = seed_volume(subjects=subjects, seed=seed)
    return {"synthetic_records": made, "agent_token": token}
