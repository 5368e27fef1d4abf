"""Public ids: a short prefix naming the kind (`mem`, `dsp`, `del`, ...) and 16 random hex digits."""

from __future__ import annotations

import secrets


def new_public_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"
