"""The offline verifier (`memory-governance verify FILE --key PEM`) run as its own process, with only the client
package on its path: no Django settings, no database, no server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import ROOT


def public_key_file(directory: Path) -> Path:
    from memory_admin.lib import signing

    key = directory / "public.pem"
    key.write_text(signing.verifying_keys()[0].public_key_pem(), encoding="ascii")
    return key


def verify_offline(directory: Path, document: Any, *, key: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Write `document` (a JSON value, or text as it is) to a file and verify it with `python -m
    memory_governance.cli verify` (what the console script runs) against this deployment's key, or `key`."""
    path = directory / "document.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
    key = key or public_key_file(directory)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE"))}
    env["PYTHONPATH"] = str(ROOT / "integrations" / "python")
    return subprocess.run(
        [sys.executable, "-m", "memory_governance.cli", "verify", str(path), "--key", str(key)],
        capture_output=True,
        text=True,
        env=env,
        cwd=directory,
        timeout=60,
        check=False,
    )
