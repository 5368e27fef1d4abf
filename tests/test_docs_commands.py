"""Every command the README and docs/ show in a shell block is run (issue 33: "every command in docs/ is run by a
test or by CI"). A command is covered when CI runs it (a step of `.ci/run`, or one of docs/deploying.md's marked
blocks, which `make deploy-check` runs), when a test named in RUN_BY_TEST runs it, when it is a synopsis whose
options the command's own parser has, or when the page marks its block `*Not run: <reason>*` on the line before
(for what only a production site can run). A block added without any of these fails here, named by page and line.
Commands named in the prose (`make <target>`, `manage.py <command>`) must exist too."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ ]*$", re.M | re.S)
NOT_RUN = re.compile(r"^\s*\*Not run: (?P<reason>[^*]{10,})\*\s*$")
DEPLOY_MARK = re.compile(r"^\s*<!-- deploy:[^>]*-->\s*$")

# Commands a test runs as written, with the test that runs them (file::function; checked to exist).
RUN_BY_TEST = {
    'curl -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:8000/api/v1/records/?project_id=project-a"': (
        "tests/test_docs_commands.py::test_the_demo_curl_lists_project_a_with_the_printed_token"
    ),
    'SOURCE_SECRET_TASKS=… SOURCE_SECRET_BINDINGS=\'{"SOURCE_SECRET_TASKS": {"tenants": ["acme"], '
    '"urls": ["https://tasks.example.com/api/"]}}\'': (
        "tests/test_docs_commands.py::test_the_secret_binding_example_binds_the_secret_as_settings_read_it"
    ),
    "pip install ./acme-memory-conformance": (
        "tests/test_conformance_plugins.py::test_a_pip_installed_package_adds_its_target_to_the_command"
    ),
    "python manage.py conformance --target acme-dict": (
        "tests/test_conformance_plugins.py::test_a_pip_installed_package_adds_its_target_to_the_command"
    ),
}
# Commands CI runs through another step: `make run` is `bin/run`, which `make smoke` starts and drives.
RUN_BY_CI_THROUGH = {"make run": "make smoke"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    before: str  # the line right before the opening fence


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks_of(text: str, page: str) -> list[Block]:
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        lines_before = text[: m.start()].rstrip("\n").split("\n")
        before = lines_before[-1] if lines_before else ""
        code = "\n".join(row[len(m["indent"]) :] for row in m["code"].rstrip("\n").split("\n"))
        found.append(Block(page, line, m["lang"].strip(), code, before))
    return found


def all_blocks() -> list[Block]:
    return [b for path in pages() for b in blocks_of(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]


def commands(code: str) -> Iterator[str]:
    """The block's commands, each as its words joined by one space: continuation lines joined, quotes that span
    lines kept together, comments dropped."""
    pending = ""
    for row in code.split("\n"):
        pending = f"{pending} {row.strip()}" if pending else row.strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on on the next line
            continue
        if words:
            yield shlex.join(words)
        pending = ""
    assert not pending.strip(), f"an unterminated command: {pending!r}"


def normal(command: str) -> str:
    return shlex.join(shlex.split(command, comments=True))


def ci_commands() -> list[list[str]]:
    """The commands `.ci/run` runs as steps (`step NAME COMMAND...`)."""
    steps = []
    for row in (ROOT / ".ci" / "run").read_text().splitlines():
        if not row.startswith("step "):
            continue
        words = shlex.split(row, comments=True)
        if len(words) > 2 and words[0] == "step":
            steps.append(words[2:])
    assert steps, ".ci/run has no steps"
    return steps


def run_by_ci(words: list[str], steps: list[list[str]]) -> bool:
    """CI runs it as written, or with variable settings only added (`make test` as `make test PYTEST_ARGS=…`)."""
    return any(
        step[: len(words)] == words and all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w) for w in step[len(words) :])
        for step in steps
    )


def _lines(code: str) -> str:
    """The code's lines without their indentation (deploy-check dedents a block's continuation lines its own way)."""
    return "\n".join(row.strip() for row in code.strip().split("\n"))


def recipe_blocks() -> set[str]:
    spec = importlib.util.spec_from_file_location("deploy_check", ROOT / "bin" / "deploy_check.py")
    assert spec and spec.loader
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return {_lines(b.code) for b in module.recipe((ROOT / "docs" / "deploying.md").read_text())}


def synopsis_problem(words: list[str]) -> str | None:
    """`python manage.py NAME [--option VALUE] ...`: None when the command's parser has every option shown."""
    if words[:2] != ["python", "manage.py"] or len(words) < 3:
        return "a synopsis ([...]) is only checked for `python manage.py` commands"
    name = words[2]
    app = get_commands().get(name)
    if app is None:
        return f"manage.py has no command {name!r}"
    parser = load_command_class(app, name).create_parser("manage.py", name)
    known = {option for action in parser._actions for option in action.option_strings}
    shown = set(re.findall(r"--[a-z][a-z0-9-]*", " ".join(words[3:])))
    missing = sorted(shown - known)
    return f"{name} has no option {missing}" if missing else None


def uncovered(blocks: list[Block], steps: list[list[str]], recipe: set[str]) -> list[str]:
    """What no test, no CI step and no marker runs, as "page:line: command (why)"."""
    by_test = {normal(c) for c in RUN_BY_TEST}
    problems = []
    for block in blocks:
        if block.lang not in SHELL_LANGUAGES:
            continue
        where = f"{block.page}:{block.line}"
        if DEPLOY_MARK.match(block.before):
            if _lines(block.code) not in recipe:
                problems.append(f"{where}: a deploy-marked block that `make deploy-check` does not read")
            continue
        if NOT_RUN.match(block.before):
            continue
        for command in commands(block.code):
            words = shlex.split(command)
            if command in by_test or run_by_ci(words, steps):
                continue
            through = RUN_BY_CI_THROUGH.get(command)
            if through is not None and run_by_ci(shlex.split(through), steps):
                continue
            if "[" in command:
                problem = synopsis_problem(words)
                if problem is None:
                    continue
                problems.append(f"{where}: {command} (synopsis: {problem})")
                continue
            problems.append(f"{where}: {command}")
    return problems


def test_every_shell_command_in_the_readme_and_docs_is_run_by_ci_or_a_test() -> None:
    problems = uncovered(all_blocks(), ci_commands(), recipe_blocks())
    assert not problems, (
        "commands no test or CI step runs (add the test to RUN_BY_TEST in tests/test_docs_commands.py, or mark a "
        "production-only block `*Not run: <reason>*` on the line before it):\n" + "\n".join(problems)
    )


def test_an_unrun_command_block_is_reported_and_a_marked_one_is_not() -> None:
    page = (
        "# Page\n\n```sh\nmake test\n```\n\n```sh\nrm -rf var/  # tidy up\n```\n\n"
        "*Not run: it needs the production load balancer.*\n```sh\ncurl https://lb.example.com/drain\n```\n\n"
        "*Not run:*\n```sh\necho a marker without its reason\n```\n\n"
        "<!-- deploy:extra -->\n```sh\necho not in the recipe\n```\n\n"
        "```sh\npython manage.py conformance [--target NAME] [--no-such-option]\n```\n"
    )
    problems = uncovered(blocks_of(page, "page.md"), ci_commands(), recipe_blocks())
    assert problems == [
        "page.md:7: rm -rf var/",
        "page.md:17: echo a marker without its reason",
        "page.md:22: a deploy-marked block that `make deploy-check` does not read",
        "page.md:26: python manage.py conformance '[--target' 'NAME]' '[--no-such-option]' "
        "(synopsis: conformance has no option ['--no-such-option'])",
    ]


def test_commands_are_read_across_continuations_and_quotes() -> None:
    code = "make test \\\n  PYTEST_ARGS=-x   # quick\nA='{\"x\":\n 1}' B=2\n\n# only a comment\n"
    assert list(commands(code)) == ["make test PYTEST_ARGS=-x", "'A={\"x\": 1}' B=2"]


def test_every_code_block_says_its_language() -> None:
    """A block without a language could hide a command from the check above: `text` for output, `sh` for commands."""
    bare = [f"{b.page}:{b.line}" for b in all_blocks() if not b.lang]
    assert not bare, f"code blocks without a language: {bare}"


def _test_exists(node: str) -> bool:
    path, _, name = node.partition("::")
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def test_the_registry_names_tests_that_exist_for_commands_the_docs_show() -> None:
    shown = {c for b in all_blocks() if b.lang in SHELL_LANGUAGES for c in commands(b.code)}
    stale = sorted(c for c in RUN_BY_TEST if normal(c) not in shown)
    assert not stale, f"RUN_BY_TEST names commands no page shows any more: {stale}"
    missing = sorted({node for node in RUN_BY_TEST.values() if not _test_exists(node)})
    assert not missing, f"RUN_BY_TEST names tests that do not exist: {missing}"


def test_make_run_is_the_bin_run_that_make_smoke_starts() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^run: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None and recipe.group(1).strip() == "bin/run"
    smoke = re.search(r"^smoke: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert smoke is not None and "bin/smoke.py" in smoke.group(1)
    assert '["bin/run"]' in (ROOT / "bin" / "smoke.py").read_text()
    assert run_by_ci(["make", "smoke"], ci_commands())


def _prose() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in pages())


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([a-z][a-z0-9-]*[a-z0-9])(?=[\s`])", _prose()))  # in inline code
    assert named, "no make target found in the docs"
    assert named <= targets, f"the docs name make targets the Makefile lacks: {sorted(named - targets)}"


def test_every_manage_py_command_the_docs_name_exists() -> None:
    named = set(re.findall(r"\bmanage\.py ([a-z_]+)\b", _prose()))
    assert {"create_principal", "import", "conformance", "mcp"} <= named
    missing = sorted(named - set(get_commands()))
    assert not missing, f"the docs name manage.py commands that do not exist: {missing}"


def _shown(page: str, start: str) -> str:
    """The shell block of docs/`page` whose first command starts with `start`, as written."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    found = [b.code for b in blocks_of(text, page) if b.lang in SHELL_LANGUAGES and b.code.lstrip().startswith(start)]
    assert len(found) == 1, f"docs/{page}: expected one block starting {start!r}"
    return found[0]


@pytest.mark.django_db(transaction=True)
def test_the_demo_curl_lists_project_a_with_the_printed_token(live_server: Any) -> None:
    """docs/dashboard.md's curl, as written, against the demo with the agent token `make run` prints."""
    from memory_admin.demo import seed_demo

    token = seed_demo(subjects=10)["agent_token"]
    code = _shown("dashboard.md", "curl ").replace("http://127.0.0.1:8000", live_server.url)
    done = subprocess.run(
        ["bash", "-c", f"set -eu\n{code}"],
        env={"PATH": "/usr/bin:/bin", "TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["results"] and {r["project_id"] for r in listed["results"]} == {"project-a"}


def test_the_secret_binding_example_binds_the_secret_as_settings_read_it() -> None:
    """docs/canonical-sources.md's binding, run by the shell as written and parsed as settings.py parses it."""
    from memory_admin.lib.source_settings import parse_secret_bindings

    code = _shown("canonical-sources.md", "SOURCE_SECRET_TASKS=")
    done = subprocess.run(
        ["bash", "-c", f'set -eu\n{code}\nprintf %s "$SOURCE_SECRET_BINDINGS"'],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    binding = parse_secret_bindings(done.stdout)["SOURCE_SECRET_TASKS"]
    assert binding.tenants == frozenset({"acme"})
    assert binding.prefixes == (("https", "tasks.example.com", 443, "/api/"),)
