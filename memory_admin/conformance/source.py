"""The stand-in canonical source: a real HTTP server on loopback whose answers a case scripts.

`GET /facts/<project_id>/<subject_id>` answers `{"data": {"value": ..., "revision": ...}}`, or fails the way
the case says: `timeout` (answers only after the policy's timeout has passed), `error` (HTTP 500).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

TIMEOUT_SECONDS = 0.5  # the policy's timeout_seconds; a `timeout` answer comes well after it


@dataclass
class SourceScript:
    answers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    hits: dict[tuple[str, str], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, project_id: str, subject_id: str, **answer: Any) -> None:
        with self.lock:
            self.answers[(project_id, subject_id)] = answer


class _Handler(BaseHTTPRequestHandler):
    script: SourceScript

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        parts = [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]
        key = (parts[-2], parts[-1]) if len(parts) >= 3 else ("", "")
        with self.script.lock:
            answer = dict(self.script.answers.get(key, {"mode": "missing"}))
            self.script.hits[key] = self.script.hits.get(key, 0) + 1
        mode = answer.get("mode", "answer")
        if mode == "timeout":
            time.sleep(TIMEOUT_SECONDS * 4)
            self._send(200, {"data": {"value": answer.get("value"), "revision": answer.get("revision")}})
        elif mode == "error":
            self._send(500, {"error": "internal error"})
        elif mode == "missing":
            self._send(404, {"error": "unknown subject"})
        else:
            self._send(200, {"data": {"value": answer["value"], "revision": answer["revision"]}})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout)


@contextmanager
def serving() -> Iterator[tuple[str, SourceScript]]:
    """Serve on 127.0.0.1 on a free port: the base URL and the script."""
    script = SourceScript()
    handler = type("Handler", (_Handler,), {"script": script})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="conformance-source", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()


def http_json_settings(base_url: str) -> dict[str, Any]:
    """The field policy's `canonical_source` for this stand-in."""
    return {
        "connector": "http_json",
        "url_template": base_url + "/facts/{project_id}/{subject_id}",
        "value_pointer": "/data/value",
        "revision_pointer": "/data/revision",
        "timeout_seconds": TIMEOUT_SECONDS,
    }
