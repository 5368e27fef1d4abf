"""`pip install ./integrations/python` in a FRESH virtual environment (no Django, nothing of this project),
then one call against the live server — the "use the client in a script" path of docs/integrations.md.

This test builds a venv and lets pip fetch the client's one dependency (httpx) and the build backend
(setuptools) from the package index configured for pip; it is the one test of the suite that needs that.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_admin.accounts.services import ensure_principal, issue_token
from memory_admin.memory.actions import Assertion, assert_fact

pytestmark = pytest.mark.django_db(transaction=True)

PACKAGE = Path(__file__).resolve().parent.parent / "integrations" / "python"

SCRIPT = textwrap.dedent(
    """
    import importlib.util, sys
    from memory_governance import Client, NotFound

    assert importlib.util.find_spec("django") is None, "Django must not be installed here"
    base_url, token = sys.argv[1], sys.argv[2]
    with Client(base_url, token) as client:
        fact = client.current("project-a", "task-proposal-017", "submission_deadline")
        print(fact["value"], fact["freshness"])
        try:
            client.record("mem-missing")
        except NotFound as error:
            print(error.code)
    """
)


def test_the_client_installs_in_a_fresh_venv_without_django_and_talks_to_the_server(
    live_server: Any, tmp_path: Path
) -> None:
    agent = ensure_principal("acme", "agent-7", ["agent"])
    assert_fact(
        agent,
        Assertion(
            project_id="project-a",
            subject_id="task-proposal-017",
            predicate="submission_deadline",
            value="2026-11-02T17:00:00+09:00",
            valid_from=datetime(2026, 10, 22, tzinfo=UTC),
            source_canonical_ref="task-system:project-a/task-proposal-017",
            source_revision="r18",
        ),
    )
    token = issue_token(agent)

    source = tmp_path / "package"  # a copy: pip builds in the folder it is given, and the checkout stays clean
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert install.returncode == 0, install.stderr[-2000:]

    run = subprocess.run(
        [str(python), "-c", SCRIPT, live_server.url, token], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["2026-11-02T17:00:00+09:00", "never_verified", "not_found"]
