"""The audit log's hash chain (issue 35, item 1): an owner who rewrites, removes or consistently re-hashes events is
caught by `manage.py audit verify`, which names the first event that does not hold; redaction keeps the chain
verifiable; concurrent writers never fork it; the migration chains events written before it."""

from __future__ import annotations

import io
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, models, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.lib import signing
from memory_admin.memory import audit, audit_chain
from memory_admin.memory.models import AuditChainHead, AuditCheckpoint, AuditEvent
from tests.support import on_postgres

pytestmark = pytest.mark.django_db(transaction=True)


def verify(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("audit", "verify", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


@contextmanager
def trigger_set_aside() -> Iterator[None]:
    """What the database's owner can do and the app cannot: on PostgreSQL, set the append-only trigger aside
    (ALTER TABLE is the owner's); on SQLite nothing stands in the way of an UPDATE."""
    if on_postgres():
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE memory_auditevent DISABLE TRIGGER audit_event_immutable")
    try:
        yield
    finally:
        if on_postgres():
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE memory_auditevent ENABLE TRIGGER audit_event_immutable")


def rewrite(event_id: int, **fields: Any) -> None:
    """An owner's UPDATE of one audit row (the model's own refusal is the app's, not the database's)."""
    with trigger_set_aside():
        models.QuerySet.update(AuditEvent.objects.filter(pk=event_id), **fields)


def chain(agent: Any, moved_deadline: Any, count: int = 10) -> list[int]:
    """The personas' tenant's chain: the assertions' events, then `count` more with varied values."""
    for i in range(count):
        audit.record_event(
            tenant=agent.tenant_id,
            actor=agent if i % 2 else None,
            action=audit.Action.POLICY_UPDATED,
            object_type="policy",
            object_id=f"policy-{i}",
            before={"n": i, "ratio": 0.25 * i, "big": 1e17, "name": "Zoë ✓", "nested": {"b": [1, 2.5], "a": None}},
            after={"n": i + 1, "when": moved_deadline[0].record.valid_from.isoformat()},
            reason=f"change {i}",
        )
    return list(AuditEvent.objects.filter(tenant_id=agent.tenant_id).order_by("id").values_list("id", flat=True))


@pytest.fixture
def small_checkpoints(settings: Any) -> None:
    settings.AUDIT_CHECKPOINT_EVERY = 4


def test_an_untouched_chain_with_redactions_verifies(as_db_owner, agent, moved_deadline, small_checkpoints):
    ids = chain(agent, moved_deadline)
    record_id = moved_deadline[0].record.memory_id
    assert AuditEvent.objects.redact(agent.tenant_id, [record_id], "[redacted: deletion]") > 0
    redacted = AuditEvent.objects.filter(object_id=record_id).first()
    assert redacted is not None and redacted.nonce == "" and redacted.before_commitment
    code, out = verify()
    assert code == 0, out
    assert f"intact, {len(ids)} events" in out
    assert AuditCheckpoint.objects.filter(tenant_id=agent.tenant_id).count() >= 3
    # Each event links to the one before it, in id order.
    links = list(AuditEvent.objects.filter(tenant_id=agent.tenant_id).order_by("id").values_list("prev_hash", "hash"))
    assert links[0][0] == audit_chain.GENESIS
    assert all(later[0] == earlier[1] for earlier, later in itertools.pairwise(links))


def test_a_changed_value_is_named(as_db_owner, agent, moved_deadline):
    ids = chain(agent, moved_deadline)
    target = ids[5]
    rewrite(target, before={"n": 99})
    code, out = verify("--tenant", "acme")
    assert code == 1
    assert f"BROKEN at event {target} " in out and "its before was changed" in out


def test_a_changed_actor_or_action_is_named(as_db_owner, agent, moved_deadline):
    ids = chain(agent, moved_deadline)
    rewrite(ids[3], action=str(audit.Action.RECORD_EXCLUDED))
    code, out = verify()
    assert code == 1 and f"BROKEN at event {ids[3]} " in out and "hash does not match" in out


def test_a_removed_event_is_found_at_the_next_link(as_db_owner, agent, moved_deadline):
    ids = chain(agent, moved_deadline)
    with trigger_set_aside():
        models.QuerySet.delete(AuditEvent.objects.filter(pk=ids[4]))
    code, out = verify()
    assert code == 1 and f"BROKEN at event {ids[5]} " in out and "link to the previous event" in out


def test_a_removed_last_event_is_found_by_the_head(as_db_owner, agent, moved_deadline):
    ids = chain(agent, moved_deadline)
    with trigger_set_aside():
        models.QuerySet.delete(AuditEvent.objects.filter(pk=ids[-1]))
    code, out = verify()
    assert code == 1 and "head records" in out


def test_a_consistent_rewrite_to_the_end_is_caught_by_a_signed_checkpoint(
    as_db_owner, agent, moved_deadline, small_checkpoints
):
    """The owner changes one event, recomputes its commitment, its hash and every later link, and moves the
    chain's head: every link holds, but a checkpoint signed before the rewrite names the old hash."""
    ids = chain(agent, moved_deadline)
    target = ids[2]
    checkpoint = AuditCheckpoint.objects.filter(tenant_id=agent.tenant_id, event_id__gte=target).order_by("event_id")
    covering = checkpoint.first()
    assert covering is not None
    rows = list(AuditEvent.objects.filter(tenant_id=agent.tenant_id, id__gte=target).order_by("id"))
    prev = rows[0].prev_hash
    with trigger_set_aside():
        for event in rows:
            if event.pk == target:
                event.reason = "nothing happened here"
                event.reason_commitment = audit_chain.commitment(event.nonce, event.reason)
            event.prev_hash = prev
            event.hash = prev = audit_chain.link_hash(
                tenant_id=event.tenant_id,
                at=event.at,
                actor_id=event.actor_id,
                actor_name=event.actor_name,
                action=event.action,
                object_type=event.object_type,
                object_id=event.object_id,
                before_commitment=event.before_commitment,
                after_commitment=event.after_commitment,
                reason_commitment=event.reason_commitment,
                prev_hash=event.prev_hash,
            )
            models.QuerySet.update(
                AuditEvent.objects.filter(pk=event.pk),
                reason=event.reason,
                reason_commitment=event.reason_commitment,
                prev_hash=event.prev_hash,
                hash=event.hash,
            )
        models.QuerySet.update(AuditChainHead.objects.filter(tenant_id=agent.tenant_id), last_hash=prev)
    code, out = verify()
    assert code == 1
    assert f"BROKEN at event {covering.event_id} " in out and "signed checkpoint" in out


def test_a_forged_checkpoint_signature_is_named(as_db_owner, agent, moved_deadline, small_checkpoints):
    chain(agent, moved_deadline)
    point = AuditCheckpoint.objects.filter(tenant_id=agent.tenant_id).order_by("event_id").last()
    assert point is not None
    AuditCheckpoint.objects.filter(pk=point.pk).update(events=point.events + 1)
    code, out = verify()
    assert code == 1 and f"BROKEN at event {point.event_id} " in out and "does not verify" in out


def test_checkpoints_signed_before_a_key_rotation_still_verify(agent, moved_deadline, small_checkpoints, monkeypatch):
    monkeypatch.delenv("TRUST_SIGNING_KEY", raising=False)
    signing.reset_cache()
    chain(agent, moved_deadline, count=6)
    old_key = signing.signing_key().key_id
    out = io.StringIO()
    call_command("audit", "rotate-key", stdout=out)
    assert old_key in out.getvalue()
    chain(agent, moved_deadline, count=6)
    keys = set(AuditCheckpoint.objects.filter(tenant_id=agent.tenant_id).values_list("key_id", flat=True))
    assert old_key in keys and signing.signing_key().key_id in keys
    code, text = verify()
    assert code == 0, text


def test_rotate_key_refuses_a_key_from_the_environment(db, monkeypatch):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    from django.core.management.base import CommandError

    pem = Ed25519PrivateKey.generate().private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    monkeypatch.setenv("TRUST_SIGNING_KEY", pem)
    signing.reset_cache()
    try:
        with pytest.raises(CommandError, match="TRUST_SIGNING_KEY"):
            call_command("audit", "rotate-key")
    finally:
        monkeypatch.delenv("TRUST_SIGNING_KEY")
        signing.reset_cache()


def test_verify_refuses_an_unknown_tenant(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No tenant"):
        call_command("audit", "verify", "--tenant", "nobody")


@pytest.mark.postgres_only(reason="concurrent writers need a server; SQLite serializes every write anyway")
def test_concurrent_writers_of_one_tenant_never_fork_the_chain(agent):
    tenant_id = agent.tenant_id
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            with tenant_context(tenant_id):
                for i in range(15):
                    with transaction.atomic():
                        audit.record_event(
                            tenant=tenant_id,
                            actor=None,
                            action=audit.Action.TASK_FAILED,
                            object_type="task",
                            object_id=f"w{n}-{i}",
                        )
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    report = audit_chain.verify_tenant(tenant_id)
    assert report.intact and report.events == 60, report.as_dict()


def test_the_migration_chains_events_written_before_it(as_db_owner, db):
    executor = MigrationExecutor(connection)
    before = [("memory", "0016_expiry_requests")]
    after = [("memory", "0017_audit_hash_chain")]
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        tenant = old.get_model("accounts", "Tenant").objects.create(slug="legacy", name="Legacy")
        OldEvent = old.get_model("memory", "AuditEvent")
        for i in range(5):
            OldEvent.objects.create(
                tenant=tenant,
                actor_name="system",
                action="policy.updated",
                object_type="policy",
                object_id=f"p{i}",
                before={"i": i, "x": 1.5},
                after=None,
                reason="legacy",
            )
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    with tenant_context(tenant.pk):
        report = audit_chain.verify_tenant(tenant.pk)
        assert report.intact and report.events == 5 and report.checkpoints == 1, report.as_dict()
        assert AuditChainHead.objects.get(tenant_id=tenant.pk).events == 5


def test_a_quiet_chain_is_signed_after_the_interval_and_by_the_checkpoint_command(agent, moved_deadline, settings):
    """Every AUDIT_CHECKPOINT_MINUTES: at the first event after the interval, and by `audit checkpoint` (the
    periodic task's body) for a chain that grew and went quiet."""
    settings.AUDIT_CHECKPOINT_EVERY = 1000
    tenant_id = agent.tenant_id
    points = AuditCheckpoint.objects.filter(tenant_id=tenant_id)
    first = points.count()
    assert first == 1  # the tenant's first event was signed
    out = io.StringIO()
    call_command("audit", "checkpoint", "--tenant", "acme", stdout=out)
    assert "Signed 1 checkpoint(s)" in out.getvalue() and points.count() == 2
    call_command("audit", "checkpoint", stdout=out)  # nothing new since: nothing signed
    assert points.count() == 2
    long_ago = timezone.now() - timedelta(minutes=settings.AUDIT_CHECKPOINT_MINUTES + 1)
    AuditChainHead.objects.filter(tenant_id=tenant_id).update(checkpointed_at=long_ago)
    audit.record_event(tenant=tenant_id, actor=None, action=audit.Action.TASK_FAILED, object_type="task", object_id="t")
    assert points.count() == 3
    last = points.order_by("-event_id").first()
    assert last is not None and last.event_id == AuditEvent.objects.filter(tenant_id=tenant_id).latest("id").pk
    code, text = verify("--json")
    assert code == 0 and '"intact": true' in text and '"checkpoints": 3' in text
