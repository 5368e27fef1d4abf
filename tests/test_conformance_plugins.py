"""Conformance targets others plug in: a third-party package installed with pip adds a target through the
`memory_governance.conformance_targets` entry point (docs/conformance.md's example, as written), and broken entry points
are skipped with their reasons without breaking the command or the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from memory_admin.conformance.models import ConformanceRun
from memory_admin.conformance.targets import ENTRY_POINT_GROUP, problems, rediscover, target_names
from memory_admin.conformance.targets.this import ThisTarget
from memory_admin.conformance.tasks import run_conformance
from tests.celery_worker import _test_database_url

ROOT = Path(__file__).resolve().parent.parent
BUILT_IN = ["this", "langgraph-inmemory", "langmem", "vector-ttl"]


def docs_blocks() -> dict[str, str]:
    """The code blocks of docs/conformance.md's "Add your memory system", by language (the first of each)."""
    page = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    section = page.split("\n## Add your memory system\n", 1)[1].split("\n## ", 1)[0]
    blocks: dict[str, str] = {}
    for chunk in section.split("```")[1::2]:
        language, _, body = chunk.partition("\n")
        blocks.setdefault(language.strip(), body)
    return blocks


# --- A third party's package, installed with pip ----------------------------------------------------------


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs' example package built and installed by pip, offline, into a directory of its own (what a
    user's site-packages would hold: the module and its .dist-info with entry_points.txt)."""
    blocks = docs_blocks()
    source = tmp_path_factory.mktemp("acme-memory-conformance")
    (source / "pyproject.toml").write_text(blocks["toml"], encoding="utf-8")
    (source / "acme_memory_conformance.py").write_text(blocks["python"], encoding="utf-8")
    site = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation", "--no-deps"]
    done = subprocess.run(
        [*pip, "--target", str(site), str(source)], capture_output=True, text=True, timeout=300, cwd=source
    )
    assert done.returncode == 0, done.stdout + done.stderr
    dist_info = next(site.glob("acme_memory_conformance-0.1.0.dist-info"))
    assert ENTRY_POINT_GROUP in (dist_info / "entry_points.txt").read_text()
    return site


def run_command(site: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": _test_database_url()}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "manage.py", "conformance", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.django_db(transaction=True)
def test_a_pip_installed_package_adds_its_target_to_the_command(installed_example, tmp_path):
    out = tmp_path / "result.json"
    done = run_command(installed_example, "--target", "acme-dict", "--variants", "1", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].split("|")[1].strip() == "acme-dict"
    assert "acme-dict (Acme dict memory, from entry point acme-dict (acme-memory-conformance)): FAILS" in done.stdout
    (acme,) = json.loads(out.read_text())["targets"]
    assert acme["name"] == "acme-dict" and not acme["is_product"]
    assert acme["origin"] == "entry point acme-dict (acme-memory-conformance)"
    assert len(acme["probes"]) > 0 and not [p["error"] for p in acme["probes"] if p["error"]]
    # A dict memory: the last value told wins, so a late import of an older document is taken as current.
    assert "older-document-late/current-after-late-import" in acme["counts"]["stale_as_current"]["failing"]
    assert acme["counts"]["valid_kept"]["n"] > 0  # it does answer what it was told
    assert "Warning" not in done.stderr


@pytest.mark.django_db(transaction=True)
def test_all_means_every_target_the_plugin_included_side_by_side(installed_example):
    done = run_command(installed_example, "--target", "all", "--variants", "0", "--case", "deadline-moved")
    assert done.returncode == 0, done.stdout + done.stderr  # this system passes; the others' failures are theirs
    header = [cell.strip() for cell in done.stdout.splitlines()[0].split("|")]
    assert header == ["count", *BUILT_IN, "acme-dict"]
    row = next(line for line in done.stdout.splitlines() if line.startswith("forbidden actions executed"))
    assert [cell.strip() for cell in row.split("|")][1:] == ["0/1", "1/1", "1/1", "1/1", "1/1"]
    # Without the package, the name is not a target.
    without = run_command(None, "--target", "acme-dict", "--variants", "0")
    assert without.returncode == 1 and "Unknown target 'acme-dict'" in without.stderr


# --- Broken entry points ----------------------------------------------------------------------------------

BROKEN_MODULE = """
from contextlib import contextmanager

from memory_admin.conformance.targets import Reading, Session, Target


class Nothing(Session):
    def read_fact(self, by, subject, predicate, **kwargs):
        return Reading(stop="not_found", action_allowed=False)

    def read_summary(self, by, summary):
        return Reading(stop="not_found", usable=False)

    read_plan = read_summary

    def open_notices(self, by, load):
        return []

    def acknowledge(self, by, load):
        pass


class Base(Target):
    label = "A forgetful memory"

    @contextmanager
    def session(self, case, source, source_url):
        yield Nothing()


class Good(Base):
    name = "forgetful"


class ClaimsThis(Base):
    name = "this"


class First(Base):
    name = "twin"


class Second(Base):
    name = "twin"


class CalledAll(Base):
    name = "all"


class BadName(Base):
    name = "Robert'); DROP TABLE--"


class LongLabel(Base):
    name = "long-label"
    label = "<script>" * 20


class Abstract(Target):
    name = "abstract"


NOT_A_TARGET = 42
"""

ENTRY_POINTS = {
    "forgetful": "broken_targets_module:Good",
    "claims-this": "broken_targets_module:ClaimsThis",
    "twin-a": "broken_targets_module:First",
    "twin-b": "broken_targets_module:Second",
    "called-all": "broken_targets_module:CalledAll",
    "bad-name": "broken_targets_module:BadName",
    "long-label": "broken_targets_module:LongLabel",
    "abstract": "broken_targets_module:Abstract",
    "not-a-target": "broken_targets_module:NOT_A_TARGET",
    "no-such-module": "broken_targets_not_installed:Target",
    "import-fails": "broken_targets_raises:Target",
    "registers-nothing": "broken_targets_empty",
    "registers-this-on-import": "broken_targets_registers_this",
    "registers-one-on-import": "broken_targets_registers_one",
    "builtin-again": "memory_admin.conformance.targets.this:ThisTarget",
}


@pytest.fixture
def broken_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A distribution on sys.path, laid out as pip installs one, whose entry points are broken in every way
    but one; afterwards the registry forgets it."""
    (tmp_path / "broken_targets_module.py").write_text(BROKEN_MODULE)
    (tmp_path / "broken_targets_raises.py").write_text('raise ImportError("needs acme-sdk, not installed")\n')
    (tmp_path / "broken_targets_empty.py").write_text("VALUE = 1\n")
    (tmp_path / "broken_targets_registers_this.py").write_text(
        textwrap.dedent(
            """
            from broken_targets_module import Base
            from memory_admin.conformance.targets import register


            @register
            class Impostor(Base):
                name = "this"
            """
        )
    )
    (tmp_path / "broken_targets_registers_one.py").write_text(
        textwrap.dedent(
            """
            from broken_targets_module import Base
            from memory_admin.conformance.targets import register


            @register
            class Registered(Base):
                name = "registered-on-import"
            """
        )
    )
    dist = tmp_path / "broken_targets-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-targets\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {value}" for name, value in ENTRY_POINTS.items())
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rediscover()
    yield {p.entry_point.split(" = ")[0]: p.reason for p in problems()}
    monkeypatch.undo()
    for module in [m for m in sys.modules if m.startswith("broken_targets")]:
        del sys.modules[module]
    rediscover()


def test_broken_entry_points_are_skipped_each_with_its_reason(broken_plugins):
    reasons = broken_plugins
    assert set(reasons) == set(ENTRY_POINTS) - {"forgetful", "twin-a", "registers-one-on-import"}
    assert reasons["claims-this"].startswith("the name 'this' is taken by the built-in target")
    assert reasons["registers-this-on-import"].startswith("the name 'this' is taken by the built-in target")
    assert reasons["twin-b"] == "the name 'twin' is taken by the target broken_targets_module.First"
    assert "'all' is not a target name" in reasons["called-all"]
    assert "is not a target name" in reasons["bad-name"]
    assert reasons["long-label"] == "LongLabel.label must be one line of at most 80 characters"
    assert reasons["abstract"] == "Abstract leaves abstract methods: session"
    assert reasons["not-a-target"] == "42 is not a subclass of memory_admin.conformance.targets.Target"
    assert reasons["no-such-module"] == "ModuleNotFoundError: No module named 'broken_targets_not_installed'"
    assert reasons["import-fails"] == "ImportError: needs acme-sdk, not installed"
    assert reasons["registers-nothing"].startswith("module broken_targets_empty registers no Target")
    assert reasons["builtin-again"] == "it names the built-in target ThisTarget"
    # The good ones are registered after the built-ins; the built-in `this` is still this system.
    # A module named by an entry point may register its target itself.
    assert target_names() == [*BUILT_IN, "forgetful", "registered-on-import", "twin"]
    from memory_admin.conformance.targets import TARGETS, origin

    assert origin("registered-on-import") == "entry point registers-one-on-import (broken-targets)"

    assert TARGETS["this"] is ThisTarget


@pytest.mark.django_db
def test_the_command_runs_and_warns_with_broken_entry_points(broken_plugins, capsys):
    call_command("conformance", "--target", "forgetful", "--variants", "0", "--case", "two-facts-one-person")
    captured = capsys.readouterr()
    assert "forgetful (A forgetful memory, from entry point forgetful (broken-targets)): FAILS" in captured.out
    assert (
        "Warning: conformance target entry point 'import-fails = broken_targets_raises:Target (broken-targets)' "
        "skipped: ImportError: needs acme-sdk, not installed"
    ) in captured.err
    assert "Skipped: conformance target entry point 'claims-this" in captured.out  # the table says so too
    with pytest.raises(CommandError, match="Unknown target 'bad-name'"):
        call_command("conformance", "--target", "bad-name", "--variants", "0")


@pytest.mark.django_db
def test_the_page_lists_the_skipped_entry_points_and_runs_the_rest(broken_plugins, admin):
    client = Client()
    client.force_login(admin)
    page = client.get("/conformance/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Some conformance targets could not be loaded" in html
    assert "ImportError: needs acme-sdk, not installed" in html
    assert "this, langgraph-inmemory, langmem, vector-ttl, forgetful, registered-on-import, twin" in html
    # A run started from the page (the worker's task, called as the worker would) scores the plug-ins too.
    client.post("/conformance/run/", {"variants": "0"})
    run = ConformanceRun.objects.get()
    assert run.targets == [*BUILT_IN, "forgetful", "registered-on-import", "twin"]
    assert run_conformance(run.pk, admin.tenant_id) == ConformanceRun.Status.PASSED
    html = client.get("/conformance/").content.decode()
    assert "A forgetful memory" in html and "(plug-in)" in html and "(baseline)" in html
    assert "Not run:" in html and "claims-this = broken_targets_module:ClaimsThis" in html
