"""The README and docs/ hold together: the README is a front door that fits on two screens, every relative link
in them reaches a file (and a heading of it, for an anchor), every page is in docs/README.md's index, and code
that sends a reader to a page (`docs/<page>.md`, `docs/<page>.md "Section"`, `README "Section"`) names one that
exists, with that section."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^[ ]*```.*?^[ ]*```[ ]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ ]+(.+?)[ ]*#*[ ]*$", re.M)
# How code cites a page: docs/<page>.md, optionally followed by "Section" or #anchor; README "Section" (or
# README, "Section").
DOCS_CITATION = re.compile(r"docs/([A-Za-z0-9_-]+\.md)(?:#([\w-]+)|[ ]+[\"']([A-Z][^\"'\n]*)[\"'])?")
README_CITATION = re.compile(r"\bREADME(?:\.md)?[ ,]+\(?[\"']([A-Z][A-Za-z -]*)[\"']")
SKIP_DIRS = {".git", ".venv", "var", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".html", ".cfg", ".ini", ".yaml", ".yml", ".json", ".sh", ""}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """The text without code blocks and inline code, where a bracket is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `-`, `_` and spaces kept),
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    kept = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def headings(path: Path) -> set[str]:
    return {h.strip() for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))}


def test_the_readme_fits_on_two_screens_and_leads_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 100, f"README.md has {len(readme.splitlines())} lines; move text to docs/"
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [row.split("#")[0].strip() for row in first_block.strip().splitlines()] == ["make run", "make test"]
    assert "](docs/README.md)" in readme


def test_every_relative_link_resolves_to_a_file_and_heading() -> None:
    broken = []
    for page in pages():
        for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not path.exists():
                broken.append(f"{where}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{where}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_in_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(prose(index))}
    missing = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in linked)
    assert not missing, f"docs/README.md does not link {missing}"


def test_the_anchors_are_githubs() -> None:
    assert (
        slug("Retrieval quality and cost: `make bench-retrieval`") == "retrieval-quality-and-cost-make-bench-retrieval"
    )
    assert slug("Add your memory system") == "add-your-memory-system"
    assert slug("Row-level security") == "row-level-security"


def _text_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIP_DIRS or any(p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES and path.name not in {"test_docs_links.py", "test_docs_commands.py"}:
            found.append(path)
    return found


def test_code_that_cites_a_page_names_one_that_exists_with_that_section() -> None:
    """A message or comment that sends a reader to a section that moved sends them nowhere."""
    readme_headings = headings(ROOT / "README.md")
    wrong = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        where = path.relative_to(ROOT)
        for page, anchor, section in DOCS_CITATION.findall(text):
            target = DOCS / page
            if not target.exists():
                wrong.append(f"{where}: docs/{page} does not exist")
            elif anchor and anchor not in anchors(target):
                wrong.append(f"{where}: docs/{page} has no #{anchor}")
            elif section and section not in headings(target):
                wrong.append(f'{where}: docs/{page} has no section "{section}"')
        for section in README_CITATION.findall(text):
            if section not in readme_headings:
                wrong.append(f'{where}: README.md has no section "{section}" (it moved to docs/)')
    assert not wrong, "\n".join(sorted(set(wrong)))
