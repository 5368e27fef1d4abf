"""docs/deploying.md is the recipe `make deploy-check` runs (bin/deploy_check.py reads its marked blocks): the
blocks are there, in the order an operator runs them, step 0 names exactly the variables the check gives
throwaway values to, and each block uses no variable that step 0, an earlier block or the check does not set."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "deploying.md"


def _deploy_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_check", ROOT / "bin" / "deploy_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_recipe_has_every_step_in_order() -> None:
    check = _deploy_check()
    blocks = check.recipe(RECIPE.read_text())
    assert [(b.name, b.service) for b in blocks] == [
        ("values", None),
        ("roles", None),
        ("migrate", None),
        ("environment", None),
        ("first-admin", None),
        ("static", None),
        ("web", "web"),
        ("worker", "worker"),
        ("beat", "beat"),
    ]
    migrate = next(b for b in blocks if b.name == "migrate").code
    assert "manage.py migrate" in migrate and "DATABASE_APP_ROLE" in migrate and "$OWNER_ROLE" in migrate
    environment = next(b for b in blocks if b.name == "environment").code
    assert "$APP_ROLE:$APP_PASSWORD" in environment  # everything after migrate connects as the app role


def test_step_0_names_exactly_the_variables_the_check_sets_and_no_block_uses_another(tmp_path: Path) -> None:
    check = _deploy_check()
    blocks = check.recipe(RECIPE.read_text())
    values = {name: "x" for name in check.EXPORTED.findall(blocks[0].code)}
    check.check_values_block(blocks[0], values)
    with pytest.raises(check.CheckFailed, match="step 0 names"):
        check.check_values_block(blocks[0], {**values, "EXTRA": "x"})
    known = set(values) | {"PATH", "ADMIN_PASSWORD"}
    for block in blocks[1:]:
        used = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", block.code))
        assert used <= known, f"deploy:{block.name} uses {sorted(used - known)}"
        known |= set(check.EXPORTED.findall(block.code))


def test_a_recipe_without_its_values_block_is_refused() -> None:
    check = _deploy_check()
    text = RECIPE.read_text().replace("<!-- deploy:values -->", "")
    with pytest.raises(check.CheckFailed, match="deploy:values"):
        check.recipe(text)


def test_a_marked_block_moved_out_of_the_recipe_is_refused() -> None:
    """A block under a later `##` section would never run: the check says so rather than skip it."""
    check = _deploy_check()
    text = RECIPE.read_text() + "\n## Later\n\n<!-- deploy:extra -->\n```sh\necho never run\n```\n"
    with pytest.raises(check.CheckFailed, match="after the recipe"):
        check.recipe(text)
