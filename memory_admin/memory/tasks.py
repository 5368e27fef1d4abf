from __future__ import annotations

from celery import shared_task

from memory_admin.memory import actions


@shared_task
def settle_valid_time_transitions() -> int:
    """Beat task: records whose validity ended become superseded or expired (see actions)."""
    return actions.settle_valid_time_transitions()
