"""Deletion requests, their tombstones and per-store progress (built by the deletion issue)."""

from __future__ import annotations
