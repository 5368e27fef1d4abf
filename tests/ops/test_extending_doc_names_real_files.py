"""docs/extending.md stays true: every file it names exists, every test it cites is a test file, and every
registry it names is a `Registry` holding the plug-ins its kind ships with."""

from __future__ import annotations

import re
from importlib import import_module

from memory_admin.lib.registry import Registry
from tests.support import ROOT

DOC = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")


def named_paths() -> set[str]:
    """The repository paths the page names in code spans (a placeholder such as `<name>` is not a file)."""
    spans = re.findall(r"`([^`\s]+)`", DOC)
    return {s for s in spans if re.fullmatch(r"[\w./-]+\.(py|html|md)", s) and "/" in s}


def test_every_file_the_page_names_exists():
    paths = named_paths()
    assert len(paths) > 15  # the table's cells were read
    missing = sorted(p for p in paths if not (ROOT / p).is_file())
    assert missing == []


def test_every_row_cites_a_test_file_that_exists():
    rows = [line for line in DOC.splitlines() if line.startswith("| a")]
    assert len(rows) == 6
    for row in rows:
        proved_by = row.rstrip("|").split("|")[-1]
        tests = re.findall(r"`(tests/[\w/]+\.py)`", proved_by)
        assert tests, row
        assert all((ROOT / t).is_file() and "\ndef test_" in (ROOT / t).read_text() for t in tests), row


def test_every_registry_the_page_names_is_one_with_its_built_ins():
    names = re.findall(r"\| `([\w.]+)\.([A-Z]+)` \|", DOC)
    assert [attr for _, attr in names] == ["STORES", "CONNECTORS", "TARGETS", "STEPS"]
    for module, attr in names:
        registry = getattr(import_module(module), attr)
        assert isinstance(registry, Registry) and len(registry) >= 2, (module, attr)
