"""The conformance suite: this system scores perfectly on every case and variant, a broken adapter and the
LangGraph baseline are caught with the right case names, the command's exit code, and the page running it
through a real Celery worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.conformance import cases as case_data
from memory_admin.conformance.agent import COUNTS
from memory_admin.conformance.models import ConformanceRun
from memory_admin.conformance.runner import DEFAULT_VARIANTS, grouped, run_suite
from memory_admin.conformance.targets import TARGETS, Reading, Target
from memory_admin.conformance.targets.this import ThisSession, ThisTarget
from tests.support import ROOT
from tests.support.celery_worker import _test_database_url, require_real_broker, running_worker, wait_until

ARTIFACTS = ROOT / "var" / "test-artifacts"
# The built-in targets, in the order of the table's columns: the product, then the baselines by name.
ALL_TARGETS = ["this", "langgraph-inmemory", "langmem", "vector-ttl"]
BASES = {
    "deadline-moved",
    "older-document-late",
    "rule-effective-tomorrow",
    "two-facts-one-person",
    "revoked-send-permission",
    "source-timeout-before-action",
    "subject-deletion",
}


def failing(target: dict[str, Any], count: str) -> set[str]:
    """The failing probes of a count, folded over variants ("case/probe")."""
    return {name for name, _ in grouped(target["counts"][count]["failing"])}


class IgnoresValidTime(ThisSession):
    """A deliberately broken adapter: every fact holds from the moment it was told, and as-of questions lose
    their valid time."""

    def valid_from(self, step: dict[str, Any]) -> datetime:
        return self.case.at(step["told_at"])

    def read_fact(self, by: str, subject: str, predicate: str, **kwargs: Any) -> Reading:
        kwargs.pop("valid_at", None)
        return super().read_fact(by, subject, predicate, **kwargs)


class BrokenTarget(ThisTarget):
    name = "this"
    session_class = IgnoresValidTime


# --- Cases and variants -------------------------------------------------------------------------


def test_the_seven_cases_are_data_and_variants_are_determined_by_the_seed():
    base = case_data.generate(0)
    assert {c.name for c in base} == BASES
    first, again, other = (case_data.generate(3, seed=s) for s in (5, 5, 6))
    assert [(c.name, c.description, c.steps) for c in first] == [(c.name, c.description, c.steps) for c in again]
    assert [c.description for c in first] != [c.description for c in other]
    assert len(first) == 7 * 4


def test_a_time_zone_variant_moves_no_instant():
    written = case_data.build(next(d for d in case_data.load_base_cases() if d["name"] == "deadline-moved"), 0, 0)
    for n in range(1, 8):
        variant = case_data.build(
            next(d for d in case_data.load_base_cases() if d["name"] == "deadline-moved"), n, seed=11
        )
        assert variant.clock == written.clock
        old = [s["assert"]["valid_from"] for s in written.steps if "assert" in s]
        new = [s["assert"]["valid_from"] for s in variant.steps if "assert" in s]
        assert [case_data.parse_time(t) for t in old] == [case_data.parse_time(t) for t in new]
        assert case_data.same_value(variant.probes[0]["expect"]["value"], "2026-11-02T17:00:00+09:00")


# --- This system, every variant ----------------------------------------------------------------


@pytest.mark.django_db
def test_this_system_gets_every_count_right_on_every_case_and_variant():
    result = run_suite(["this"], variants=DEFAULT_VARIANTS, seed=0)
    assert {c["base"] for c in result["cases"]} == BASES
    assert len(result["cases"]) == 7 * (DEFAULT_VARIANTS + 1)
    (this,) = result["targets"]
    counts = this["counts"]
    assert all(not p["error"] for p in this["probes"]), [p["error"] for p in this["probes"] if p["error"]]
    assert counts["stale_as_current"]["n"] == 0 < counts["stale_as_current"]["d"]
    assert counts["forbidden_executed"]["n"] == 0 < counts["forbidden_executed"]["d"]
    assert counts["valid_kept"]["n"] == counts["valid_kept"]["d"] > 0
    assert counts["right_stops"]["n"] == counts["right_stops"]["d"] > 0
    assert counts["needless_stops"]["n"] == 0
    assert this["perfect"]
    # Everything the agent did is kept: what it retrieved, its context, the actions it attempted.
    purchase = next(p for p in this["probes"] if p["name"].endswith("/purchase-source-confirms"))
    assert purchase["executed"] and purchase["actions"][0]["executed"] and purchase["retrieval"][0]["value"]
    refused = next(p for p in this["probes"] if p["name"] == "source-timeout-before-action/purchase-while-source-down")
    assert refused["stop_reason"] == "recheck_required" and not refused["actions"][0]["executed"]
    assert refused["shown"] == ["net-30 at 1200 JPY"]  # the last verified value, said so, not acted on


@pytest.mark.django_db
def test_the_throwaway_tenants_leave_nothing_behind():
    from memory_admin.accounts.models import Tenant
    from memory_admin.memory.models import MemoryRecord

    tenants = Tenant.objects.count()
    run_suite(["this"], variants=0, only=["deadline-moved"])
    assert Tenant.objects.count() == tenants
    assert not Tenant.objects.filter(slug__startswith="conformance-").exists()
    assert not MemoryRecord.objects.filter(project__key__startswith="deadline-moved").exists()


@pytest.mark.django_db
def test_tomorrows_rule_recorded_before_todays_is_a_variant_and_passes():
    """Case 3 in the order of arrival it once left out: tomorrow's rule announced before today's was entered
    (today's then arrives as an older revision, and answers until tomorrow: rule 3)."""
    result = run_suite(["this"], variants=DEFAULT_VARIANTS, seed=0, only=["rule-effective-tomorrow"])
    arrivals = {c["name"]: c["description"]["arrival"] for c in result["cases"]}
    reversed_order = {name for name, arrival in arrivals.items() if arrival == "tomorrow → today"}
    assert reversed_order and "today → tomorrow" in arrivals.values()
    (this,) = result["targets"]
    assert this["perfect"], {k: c["failing"] for k, c in this["counts"].items() if c["failing"]}
    probes = [p for p in this["probes"] if p["case"] in reversed_order]
    assert {p["probe"] for p in probes} >= {"limit-today", "approve-today-under-todays-limit", "limit-from-tomorrow"}
    assert all(not p["error"] and not p["stopped"] for p in probes)


# --- The suite can fail ------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_adapter_that_ignores_valid_time_is_caught_by_name():
    broken_only: list[Target] = [BrokenTarget()]
    result = run_suite(broken_only, variants=1, seed=0)
    (broken,) = result["targets"]
    assert not broken["perfect"]
    assert failing(broken, "stale_as_current") == {
        "rule-effective-tomorrow/limit-today",
        "rule-effective-tomorrow/approve-today-under-todays-limit",
    }
    assert failing(broken, "valid_kept") == {
        "rule-effective-tomorrow/limit-today",
        "rule-effective-tomorrow/approve-today-under-todays-limit",
        "rule-effective-tomorrow/limit-last-month",
        "older-document-late/deadline-before-any-newer-revision",
        "older-document-late/deadline-where-a-newer-revision-covers",
        "deadline-moved/deadline-valid-on-oct-21",
        "revoked-send-permission/permission-on-oct-20",
    }
    assert failing(broken, "forbidden_executed") == set()


def test_the_langgraph_baseline_fails_where_a_plain_store_must():
    result = run_suite(["langgraph-inmemory"], variants=1, seed=0)
    (baseline,) = result["targets"]
    assert not baseline["is_product"] and not baseline["perfect"]
    assert failing(baseline, "forbidden_executed") == {
        "deadline-moved/reminder-plan-on-old-date",
        "revoked-send-permission/scheduled-send",
        "source-timeout-before-action/purchase-while-source-down",
    }
    assert {
        "older-document-late/current-after-late-import",
        "rule-effective-tomorrow/limit-today",
        "deadline-moved/other-session-loaded-context",
        "subject-deletion/summary-of-deleted-subject",
        "source-timeout-before-action/purchase-source-changed",
    } <= failing(baseline, "stale_as_current")
    assert {"deadline-moved/deadline-valid-on-oct-21", "deadline-moved/deadline-believed-on-oct-21"} <= failing(
        baseline, "valid_kept"
    )
    # Fair where it is: two facts about Sato are kept apart, and a deleted subject's own facts are gone.
    assert not {n for n in failing(baseline, "valid_kept") if n.startswith("two-facts-one-person/")}
    assert "subject-deletion/deleted-subject-email" not in failing(baseline, "right_stops")


# --- The command -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_command_prints_every_target_side_by_side_and_writes_json(tmp_path, capsys):
    out = tmp_path / "result.json"
    call_command("conformance", "--target", "all", "--variants", "0", "--json", str(out))
    printed = capsys.readouterr().out
    header = printed.splitlines()[0]
    assert [cell.strip() for cell in header.split("|")] == ["count", *ALL_TARGETS]
    assert "forbidden actions executed [0 is right]" in printed
    assert "this (this system): every count right" in printed
    assert "langgraph-inmemory (LangGraph InMemoryStore): FAILS" in printed
    saved = json.loads(out.read_text())
    assert [t["name"] for t in saved["targets"]] == ALL_TARGETS
    assert {c.key for c in COUNTS} == set(saved["targets"][0]["counts"])


@pytest.mark.django_db
def test_the_command_fails_when_this_system_fails_a_count(capsys):
    with TARGETS.temporarily(BrokenTarget), pytest.raises(CommandError) as refused:
        call_command("conformance", "--target", "this", "--variants", "0", "--case", "rule-effective-tomorrow")
    assert refused.value.returncode == 1
    assert "rule-effective-tomorrow/limit-today" in capsys.readouterr().out


@pytest.mark.django_db
def test_the_baseline_failing_alone_does_not_fail_the_command(capsys):
    call_command("conformance", "--target", "langgraph-inmemory", "--variants", "0")
    assert "FAILS" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_the_command_exits_zero_as_a_process_when_this_system_passes(tmp_path):
    env = {**os.environ, "DATABASE_URL": _test_database_url()}
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "conformance",
            "--target",
            "this",
            "--variants",
            "1",
            "--case",
            "two-facts-one-person",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every count right" in done.stdout


# --- The page ----------------------------------------------------------------------------------


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


@pytest.mark.django_db
def test_only_admins_and_compliance_see_the_page(admin, compliance, owner, agent):
    assert signed_in(admin).get("/conformance/").status_code == 200
    assert signed_in(compliance).get("/conformance/").status_code == 200
    assert signed_in(owner).get("/conformance/").status_code == 403
    assert signed_in(owner).post("/conformance/run/", {"variants": "0"}).status_code == 403
    assert not ConformanceRun.objects.exists()


@pytest.mark.django_db
def test_bad_variants_are_refused_with_a_message_and_no_run(admin):
    client = signed_in(admin)
    for bad in ("-1", "11", "many", ""):
        page = client.post("/conformance/run/", {"variants": bad}, follow=True)
        assert page.status_code == 200
        assert "Variants must be a whole number from 0 to 10." in page.content.decode()
    assert not ConformanceRun.objects.exists()
    assert client.get("/conformance/?run=abc").status_code == 404


@pytest.mark.django_db
def test_another_tenants_runs_are_not_shown(admin, outsider):
    with tenant_context(outsider.tenant_id):
        theirs = ConformanceRun.objects.create(tenant_id=outsider.tenant_id, started_by=outsider, variants=0)
    assert signed_in(admin).get(f"/conformance/?run={theirs.pk}").status_code == 404
    assert "No run yet." in signed_in(admin).get("/conformance/").content.decode()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_page_runs_the_suite_through_a_worker_and_shows_every_target(admin, compliance):
    require_real_broker()
    client = signed_in(admin)
    with running_worker(ARTIFACTS / "celery-conformance-worker.log"):
        page = client.post("/conformance/run/", {"variants": "0"}, follow=True)
        assert "The conformance suite is running" in page.content.decode()
        run = ConformanceRun.objects.get()
        assert run.tenant_id == admin.tenant_id and run.targets == ALL_TARGETS
        # A second start while it runs is refused.
        again = client.post("/conformance/run/", {"variants": "0"}, follow=True)
        assert "A run is already under way" in again.content.decode()
        assert wait_until(lambda: ConformanceRun.objects.get(pk=run.pk).finished, timeout=240), "the run never finished"
    run.refresh_from_db()
    assert run.status == ConformanceRun.Status.PASSED, run.error
    assert run.done == run.total == 7 * len(ALL_TARGETS)
    html = signed_in(compliance).get("/conformance/").content.decode()
    assert f"Results of run {run.pk}" in html
    assert "this system" in html and "LangGraph InMemoryStore" in html
    assert "LangMem tools over InMemoryStore" in html and "Vector store with TTL (AgentCore-like)" in html
    assert "forbidden actions executed" in html
    assert "source-timeout-before-action/purchase-while-source-down" in html  # the baseline's failure
    assert "every count right" in html and "fails" in html
    # The progress fragment the page polls asks for one reload once the run is over.
    fragment = signed_in(admin).get("/conformance/", headers={"HX-Request": "true"})
    assert fragment["HX-Refresh"] == "true" and "Results of run" not in fragment.content.decode()


@pytest.mark.django_db
def test_a_running_run_shows_its_progress_and_keeps_polling(admin):
    ConformanceRun.objects.create(
        tenant_id=admin.tenant_id,
        started_by=admin,
        status=ConformanceRun.Status.RUNNING,
        targets=["this", "langgraph-inmemory"],
        variants=0,
        done=3,
        total=14,
        current="this: subject-deletion",
    )
    fragment = signed_in(admin).get("/conformance/", headers={"HX-Request": "true"})
    html = fragment.content.decode()
    assert 'hx-trigger="every 2s"' in html and "3 of 14 case runs" in html and "this: subject-deletion" in html
    assert "HX-Refresh" not in fragment
    page = signed_in(admin).get("/conformance/").content.decode()
    assert 'data-testid="run-conformance" disabled' in page
