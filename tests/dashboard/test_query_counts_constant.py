"""No dashboard page makes a query per row or per policy (issue 33, item 2).

Each page is loaded by a person holding every role (so the overview's inbox fills every one of its lists)
over a small tenant (2 of everything) and again after the tenant grew to 30 policies, 30 overdue high-risk
records, 30 disputes, 30 deletion requests, 30 notices... The number of queries must be the same: a
loop that asked the database once per policy (the inbox's failing canonical sources did) or once per row
fails here, whatever the backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from deletion import service
from deletion.models import StoreProgress
from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import ensure_principal, issue_token
from memory_admin.conformance.models import ConformanceRun
from memory_admin.derived.models import ContextLoad, ExportFile, Invalidation
from memory_admin.memory import expiry
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, Project, RecheckAttempt

SMALL, LARGE = 2, 30
FACT = {"project_id": "project-a", "subject_id": "story", "predicate": "headline"}
HTTP_SOURCE = {"connector": "http_json", "url": "http://127.0.0.1:9/{subject_id}", "value_path": "value"}


def _assert(agent: Principal, subject: str, predicate: str, value: Any, **kwargs: Any) -> MemoryRecord:
    now = timezone.now()
    assertion = Assertion(
        project_id="project-a",
        subject_id=subject,
        predicate=predicate,
        value=value,
        valid_from=kwargs.pop("valid_from", now - timedelta(days=1)),
        source_canonical_ref=f"crm://{subject}",
        source_revision=str(value),
        **kwargs,
    )
    return assert_fact(agent, assertion).record


class World:
    """A tenant that grows: `grow(n)` adds rows until it holds n of each thing the pages list."""

    def __init__(self, agent: Principal, other: Principal, compliance: Principal) -> None:
        self.agent, self.other, self.compliance = agent, other, compliance
        self.size = 0
        self.tenant_id = agent.tenant_pk
        _assert(agent, FACT["subject_id"], FACT["predicate"], "v0")
        self.project = Project.objects.get(tenant_id=self.tenant_id, key="project-a")

    def grow(self, n: int) -> None:
        now = timezone.now()
        for i in range(self.size, n):
            self._one(i, now)
        self.size = n

    def _one(self, i: int, now: Any) -> None:
        agent, tenant_id = self.agent, self.tenant_id
        # A high-risk field with a canonical source that failed its last sweep, and a record of it overdue.
        predicate = f"field_{i}"
        FieldPolicy.objects.create(
            tenant_id=tenant_id,
            predicate=predicate,
            risk=FieldPolicy.Risk.HIGH,
            on_failure=FieldPolicy.OnFailure.BLOCK_ACTION if i % 2 else FieldPolicy.OnFailure.ANSWER_WITH_CAVEAT,
            canonical_source=HTTP_SOURCE,
        )
        record = _assert(agent, f"subject-{i}", predicate, f"value-{i}")
        MemoryRecord.all_objects.filter(pk=record.pk).update(recheck_after=now - timedelta(hours=i + 1))
        RecheckAttempt.objects.create(
            tenant_id=tenant_id,
            record=record,
            outcome=RecheckAttempt.Result.SOURCE_UNAVAILABLE,
            trigger=RecheckAttempt.Trigger.SWEEP,
            error="connection refused",
        )
        # The fact page's history grows by one version, with a recheck attempt each.
        head = MemoryRecord.objects.for_tenant(tenant_id).get(
            subject_id=FACT["subject_id"], predicate=FACT["predicate"], superseded_by__isnull=True
        )
        version = _assert(agent, FACT["subject_id"], FACT["predicate"], f"v{i + 1}", expected_revision=head.revision)
        RecheckAttempt.objects.create(
            tenant_id=tenant_id,
            record=version,
            outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED,
            trigger=RecheckAttempt.Trigger.SWEEP,
        )
        # An open dispute between two sources.
        one = _assert(agent, f"disputed-{i}", "owner_name", "Ann")
        two = MemoryRecord.all_objects.get(pk=_assert(self.other, f"disputed-{i}", "owner_email", "b@x").pk)
        dispute = Dispute.objects.create(
            tenant_id=tenant_id, project=self.project, subject_id=f"disputed-{i}", predicate="owner_name"
        )
        dispute.candidates.add(one, two)
        # An agent's request that a fact be expired.
        expiry.request_expiry(agent, record.memory_id, f"stale {i}")
        # A notice an agent has not applied (one agent per notice, so the inbox's list grows too).
        holder = ensure_principal("acme", f"holder-{i}", ["agent"])
        load = ContextLoad.objects.create(
            tenant_id=tenant_id, agent=holder, session_id=f"s{i}", expires_at=now + timedelta(hours=1)
        )
        Invalidation.objects.create(
            tenant_id=tenant_id, agent=holder, load=load, record=record, memory_id=record.memory_id, revision=1
        )
        # A deletion request with a failed store.
        filed = service.request_deletion(
            self.compliance, project_id="project-a", scope={"subject_id": f"gone-{i}"}, reason="Data subject request"
        )
        assert not isinstance(filed, service.Preview)
        first_store = filed.stores.order_by("id").first()
        assert first_store is not None
        StoreProgress.objects.filter(pk=first_store.pk).update(
            state=StoreProgress.State.FAILED, last_error="store down"
        )
        # An API token, an export file and a finished conformance run.
        issue_token(holder, f"token {i}")
        ExportFile.objects.create(tenant_id=tenant_id, project=self.project, path=f"/nonexistent/{i}.jsonl", rows=i)
        ConformanceRun.objects.create(
            tenant_id=tenant_id, status=ConformanceRun.Status.ERROR, finished_at=now, targets=["ours"], result=None
        )


@pytest.fixture
def everyone(db: None) -> Principal:
    return ensure_principal("acme", "root", ["owner", "admin", "compliance"], password="pw-root", validate=False)


@pytest.fixture
def world(everyone, agent, other_agent, compliance) -> World:
    return World(agent, other_agent, compliance)


def _fact_url() -> str:
    return "/facts/?project={project_id}&subject={subject_id}&predicate={predicate}".format(**FACT)


def _first_deletion(world: World) -> str:
    request = service.visible_requests(world.compliance).order_by("id").first()
    assert request is not None
    return f"/deletions/{request.public_id}/"


def _first_policy(world: World) -> str:
    policy = FieldPolicy.objects.filter(tenant_id=world.tenant_id).order_by("id").first()
    assert policy is not None
    return f"/policies/{policy.pk}/"


PAGES: list[tuple[str, Callable[[World], str]]] = [
    ("overview", lambda w: "/"),
    ("records", lambda w: "/records/"),
    ("records, every status", lambda w: "/records/?status=all&size=200"),
    ("records, API parameter names", lambda w: "/records/?project_id=project-a&status=accepted"),
    ("fact", lambda w: _fact_url()),
    ("fact, as of", lambda w: _fact_url() + "&valid_at=2026-01-01T00:00"),
    ("disputes", lambda w: "/disputes/"),
    ("disputes, all", lambda w: "/disputes/?status=all"),
    ("expiry requests", lambda w: "/expiry-requests/"),
    ("rechecks", lambda w: "/rechecks/"),
    ("agents", lambda w: "/agents/"),
    ("audit", lambda w: "/audit/"),
    ("deletions", lambda w: "/deletions/"),
    ("deletion", _first_deletion),
    ("exports", lambda w: "/exports/"),
    ("policies", lambda w: "/policies/"),
    ("policy", _first_policy),
    ("tokens", lambda w: "/tokens/"),
    ("conformance", lambda w: "/conformance/"),
    ("lockouts", lambda w: "/lockouts/"),
    ("retrieval", lambda w: "/retrieval/"),
]


def _count(client: Client, url: str) -> int:
    assert client.get(url).status_code == 200, url  # warm: the session, caches filled on a first read
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(queries.captured_queries)


def test_every_page_makes_as_many_queries_for_30_rows_as_for_2(world, everyone):
    """One tenant grown once (building it is the slow part): every page counted at 2 and at 30 of each."""
    client = Client()
    client.force_login(everyone)
    world.grow(SMALL)
    small = {name: _count(client, url_of(world)) for name, url_of in PAGES}
    world.grow(LARGE)
    large = {name: _count(client, url_of(world)) for name, url_of in PAGES}
    table = "\n".join(f"{name}: {small[name]} -> {large[name]}" for name, _ in PAGES)
    print(f"queries per page, {SMALL} -> {LARGE} of each:\n{table}")
    assert large == small, f"queries per page, {SMALL} -> {LARGE} of each:\n{table}"


def test_the_inbox_lists_every_failing_canonical_source_and_each_kind(world, everyone):
    """The count above is about the inbox's work, so the inbox must really hold what it counts over."""
    world.grow(LARGE)
    client = Client()
    client.force_login(everyone)
    inbox = client.get("/").context["inbox"]
    kinds = {kind: sum(1 for item in inbox if item.kind == kind) for kind in {i.kind for i in inbox}}
    assert kinds["policy"] == LARGE  # every policy's canonical source failed its last sweep
    assert kinds["recheck"] == LARGE
    assert kinds["dispute"] == 10 and kinds["notice"] == 10 and kinds["expiry"] == 10 and kinds["deletion"] == 20
    # A later successful sweep of one field clears its policy from the inbox; a manual check does not count.
    record = MemoryRecord.objects.for_tenant(world.tenant_id).get(predicate="field_0")
    RecheckAttempt.objects.create(
        tenant_id=world.tenant_id,
        record=record,
        outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED,
        trigger=RecheckAttempt.Trigger.SWEEP,
    )
    record = MemoryRecord.objects.for_tenant(world.tenant_id).get(predicate="field_1")
    RecheckAttempt.objects.create(
        tenant_id=world.tenant_id,
        record=record,
        outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED,
        trigger=RecheckAttempt.Trigger.MANUAL,
    )
    titles = [i.title for i in client.get("/").context["inbox"] if i.kind == "policy"]
    assert len(titles) == LARGE - 1
    assert "Policy for field_0 (all projects)" not in titles and "Policy for field_1 (all projects)" in titles
