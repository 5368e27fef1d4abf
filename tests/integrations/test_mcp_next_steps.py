"""Every MCP refusal's `next_step` is true to its code and to the tool's case (issue 31), audited from one table.

Each row is a real call through the official SDK against a live server, in a world the row sets up: the code it
must answer, words its next step must say (the way out of that case) and words it must not (another case's advice,
such as "nothing usable is recorded" for an id that is simply unknown). Apart from the table, every error code a
tool can answer has a next step, and a next step names only tools that exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from deletion import service as deletion_service
from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import issue_token
from memory_admin.lib.errors import DomainError
from memory_admin.mcp import tools
from memory_admin.memory import batch, errors
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import FieldPolicy
from tests.support import DEADLINE, at, deadline
from tests.support.mcp import FACT, REMEMBER, TOOLS, data, over_http, run

pytestmark = pytest.mark.django_db(transaction=True)


def _recorded(agent: Principal) -> None:
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1))


def _disputed(agent: Principal) -> None:
    _recorded(agent)
    assert_fact(agent, deadline("2026-10-31T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 2))


def _only_the_task_system_may_write(agent: Principal) -> None:
    FieldPolicy.objects.create(
        tenant_id=agent.tenant_pk, predicate=DEADLINE["predicate"], authorized_issuers=["task-system"]
    )


@dataclass(frozen=True)
class Row:
    name: str
    tool: str
    arguments: dict[str, Any]
    code: str
    says: tuple[str, ...]
    never: tuple[str, ...] = ()
    world: Callable[[Principal], None] = field(default=lambda agent: None)


ROWS = [
    Row("bad-argument", "remember", {**REMEMBER, "subject_id": "../etc"}, "invalid", ("arguments named in errors",)),
    Row(
        "missing-argument",
        "remember",
        {k: v for k, v in REMEMBER.items() if k != "predicate"},
        "invalid",
        ("arguments named in errors",),
    ),
    Row(
        "change-without-revision",
        "remember",
        {**REMEMBER, "value": "2026-11-02T17:00+09:00", "source_revision": "r18"},
        "expected_revision_required",
        ("expected_revision", "recall"),
        world=_recorded,
    ),
    Row(
        "stale-revision",
        "remember",
        {**REMEMBER, "value": "2026-11-02T17:00+09:00", "source_revision": "r18", "expected_revision": 7},
        "revision_conflict",
        ("recall", "expected_revision", "Do not retry blindly"),
        world=_recorded,
    ),
    Row(
        "not-an-authorized-source",
        "remember",
        REMEMBER,
        "issuer_not_authorized",
        ("not an authorized source", "not stored"),
        world=_only_the_task_system_may_write,
    ),
    Row(
        "change-while-disputed",
        "remember",
        {**REMEMBER, "value": "2026-11-02T17:00+09:00", "source_revision": "r18", "expected_revision": 1},
        "dispute_open",
        ("owner must resolve", "list_conflicts"),
        world=_disputed,
    ),
    Row("act-on-disputed", "recall", {**FACT, "purpose": "action"}, "fact_disputed", ("Do not act",), world=_disputed),
    Row("nothing-recorded", "recall", FACT, "not_found", ("Nothing usable is recorded",)),
    Row(
        "unknown-memory-id",
        "history",
        {"memory_id": "mem-does-not-exist"},
        "not_found",
        ("No record has this memory id", "search_memory"),
        ("Nothing usable is recorded",),
    ),
    Row(
        "unknown-notice",
        "acknowledge_notice",
        {"notice_id": "inv-does-not-exist"},
        "not_found",
        ("pending_notices",),
        ("Nothing usable is recorded",),
    ),
    Row(
        "forget-without-scope",
        "request_forget",
        {"project_id": "project-a", "reason": "user asked"},
        "invalid",
        ("arguments named in errors",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_each_refusal_says_what_to_do_in_its_own_case(live_server, agent, row: Row) -> None:
    row.world(agent)
    token = issue_token(agent)

    async def session() -> Any:
        async with over_http(live_server.url, token) as client:
            return await client.call_tool(row.tool, row.arguments)

    answer = run(session)
    assert answer.is_error, answer.content
    payload = data(answer)
    assert payload["code"] == row.code, payload
    step = payload["next_step"]
    assert step == tools.next_step_for(row.tool, row.code)
    for words in row.says:
        assert words in step, (row.name, step)
    for words in row.never:
        assert words not in step, (row.name, step)
    assert step in answer.content[0].text  # the summary a model reads carries it too


def _codes() -> set[str]:
    """Every domain error's code (subclasses of DomainError anywhere in the product)."""
    seen: set[str] = set()
    pending: list[type[DomainError]] = [DomainError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        seen.add(cls.code)
    return seen


# Codes no MCP tool can answer, each with the reason (a new code lands in one list or the other).
NOT_REACHABLE = {
    "error": "the base class's placeholder",
    "preview_invalid": "the deletion preview is a compliance step of the dashboard and API, not a tool",
    "preview_mismatch": "the same",
    "batch_too_large": "no tool takes a batch",
    "not_applied": "an atomic batch's items that were not applied; no tool takes a batch",
}


def test_every_code_a_tool_can_answer_has_a_next_step() -> None:
    # Every module defining errors is imported above, so each subclass is found.
    assert {errors.NotFound.code, batch.BatchTooLarge.code, deletion_service.PreviewMismatch.code} <= _codes()
    codes = _codes() | {"throttled", "authentication_failed", "not_authenticated", "internal_error"}
    missing = {code for code in codes - NOT_REACHABLE.keys() if tools.next_step_for("remember", code) is None}
    assert not missing, f"codes without a next step: {sorted(missing)}"


def test_a_next_step_names_only_tools_that_exist() -> None:
    steps = [*tools._NEXT_STEP.values(), *tools._TOOL_NEXT_STEP.values()]
    named = {word for step in steps for word in re.findall(r"\b[a-z]+_[a-z_]+\b", step)}
    arguments = {"expected_revision", "retry_after", "memory_id", "derived_from"}
    assert named - arguments <= TOOLS, sorted(named - arguments - TOOLS)
    assert {tool for tool, _ in tools._TOOL_NEXT_STEP} <= TOOLS
