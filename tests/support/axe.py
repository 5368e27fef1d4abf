"""axe-core in a browser test: the copy bundled in axe-playwright-python, injected from the package file through
the DevTools protocol (the page's CSP does not apply, nothing is fetched). `serious_violations(page)` lists the
serious and critical violations, each with its rule, help text and first targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from axe_playwright_python.base import AXE_FILE_PATH
from playwright.sync_api import Page

AXE_SCRIPT = Path(AXE_FILE_PATH).read_text(encoding="utf-8")


def serious_violations(page: Page) -> list[str]:
    page.evaluate(AXE_SCRIPT)
    results: dict[str, Any] = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found = []
    for v in results["violations"]:
        if v["impact"] in ("serious", "critical"):
            targets = [", ".join(map(str, n["target"])) for n in v["nodes"][:3]]
            found.append(f"{v['id']} ({v['impact']}): {v['help']} at {json.dumps(targets)}")
    return found
