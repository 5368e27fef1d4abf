"""A stand-in canonical source: a real HTTP server on loopback whose answers the tests script."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


@dataclass
class Script:
    """What the source answers per subject: `{"value": ..., "revision": ...}` or a failure mode."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, subject: str, **answer: Any) -> None:
        with self.lock:
            self.answers[subject] = answer


class _Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        parts = [unquote(p) for p in self.path.strip("/").split("/")]
        subject = parts[-1] if parts else ""
        with self.script.lock:
            answer = dict(self.script.answers.get(subject, {"mode": "not_found"}))
            self.script.hits[subject] = self.script.hits.get(subject, 0) + 1
        mode = answer.pop("mode", "ok")
        if mode == "slow":
            time.sleep(answer.get("delay", 3))
            mode = "ok"
        if mode == "error":
            self._send(answer.get("status", 500), {"error": "boom"})
        elif mode == "not_found":
            self._send(404, {"error": "unknown subject"})
        elif mode == "auth" and self.headers.get("X-Api-Key") != answer.get("key"):
            self._send(401, {"error": "bad key"})
        elif mode == "ambiguous":
            self._send(200, {"data": {"deadline": answer["values"], "revision": "r99"}})
        elif mode == "no_value":
            self._send(200, {"data": {"revision": "r99"}})
        elif mode == "not_json":
            body = b"<html>maintenance</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._send(200, {"data": {"deadline": answer["value"], "revision": answer["revision"]}})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)


@contextmanager
def serving() -> Iterator[tuple[str, Script]]:
    """Serve on 127.0.0.1 on a free port; yields the base URL and the script."""
    script = Script()
    handler = type("Handler", (_Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()


def http_json_source(base_url: str, timeout: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {
        "connector": "http_json",
        "url_template": base_url + "/tasks/{project_id}/{subject_id}",
        "value_pointer": "/data/deadline",
        "revision_pointer": "/data/revision",
        "timeout_seconds": timeout,
        **extra,
    }


def deadline_policy_checked_before_action(tenant: Any, base_url: str, **extra: Any) -> Any:
    """The deadline's field policy as the recheck tests use it: the task system on loopback as its canonical source
    (`http_json_source`, 0.5 s), a daily recheck, a recheck before every action, and actions blocked when the
    source cannot be reached. `extra`: more of the policy's fields (authorized_issuers, ...)."""
    from memory_admin.memory.models import FieldPolicy

    return FieldPolicy.objects.create(
        tenant=tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        canonical_source=http_json_source(base_url, timeout=0.5),
        recheck_interval=timedelta(days=1),
        recheck_before_action=True,
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        **extra,
    )
