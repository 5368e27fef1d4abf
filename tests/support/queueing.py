"""A stand-in for a Celery task, for tests of what is enqueued rather than of the broker."""

from __future__ import annotations


class RecordingTask:
    """Stands in for a Celery task's `.delay`: the broker is not what these tests are about."""

    name = "tests.recording"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def delay(self, *args: object) -> None:
        self.calls.append(args)
