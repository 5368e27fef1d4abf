"""A fact's `derived_from` is checked like a summary's bases in every door that writes facts (issue 31): an id
that does not exist, another tenant's memory, another project's, or a revision the record does not have is a 400
naming the id, and nothing is written; a base a deletion removed is still a 410 (the tombstone's refusal)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, body, deadline


@pytest.fixture
def bases(agent, outsider):
    mine = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    with tenant_context(outsider.tenant_id):
        theirs = assert_fact(outsider, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    return {"mine": mine, "theirs": theirs}


def derived(**refs) -> dict:
    data = body(deadline("2026-11-02", "r1", at(10, 22), ref="notes:summary"))
    data["subject_id"] = "summary-of-deadline"
    data["derived_from"] = [refs]
    return data


def cases(bases) -> dict[str, dict]:
    return {
        "unknown": derived(memory_id="mem-does-not-exist", revision=1),
        "other tenant": derived(memory_id=bases["theirs"].memory_id, revision=1),
        "wrong revision": derived(memory_id=bases["mine"].memory_id, revision=7),
        "other project": {**derived(memory_id=bases["mine"].memory_id, revision=1), "project_id": "project-b"},
    }


def written() -> int:
    return MemoryRecord.all_objects.filter(subject_id="summary-of-deadline").count()


def test_the_api_refuses_each_bad_base_with_400(api, agent, bases):
    for name, data in cases(bases).items():
        response = api(agent).post("/api/v1/records/", data, format="json")
        assert response.status_code == 400, (name, response.content)
        assert "derived_from" in response.json()["errors"], name
    good = derived(memory_id=bases["mine"].memory_id, revision=1)
    assert api(agent).post("/api/v1/records/", good, format="json").status_code == 201
    assert written() == 1


def test_the_batch_refuses_them_item_by_item(api, agent, bases):
    items = [*cases(bases).values(), derived(memory_id=bases["mine"].memory_id, revision=1)]
    response = api(agent).post("/api/v1/records/batch/", {"items": items}, format="json")
    results = response.json()["results"]
    assert [r["status"] for r in results] == [400, 400, 400, 400, 201], results
    assert all("derived_from" in r["error"]["errors"] for r in results[:4])
    assert written() == 1


def test_the_import_refuses_them_by_line(agent, bases, tmp_path: Path):
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in cases(bases).values()), encoding="utf-8")
    err = StringIO()
    with pytest.raises(CommandError, match="4 line"):
        call_command(
            "import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=StringIO(), stderr=err
        )
    refused = [line for line in err.getvalue().splitlines() if line.startswith("line ")]
    assert len(refused) == 4 and all("derived_from:" in line for line in refused), refused
    assert written() == 0


def test_the_outsiders_id_is_named_the_same_as_an_unknown_one(api, agent, bases):
    """Nothing tells another tenant's id from one that does not exist."""
    unknown = api(agent).post("/api/v1/records/", cases(bases)["unknown"], format="json").json()
    theirs = api(agent).post("/api/v1/records/", cases(bases)["other tenant"], format="json").json()
    assert unknown["errors"]["derived_from"][0].split(":", 1)[1] == theirs["errors"]["derived_from"][0].split(":", 1)[1]
    assert DEADLINE["project_id"] in theirs["errors"]["derived_from"][0]
