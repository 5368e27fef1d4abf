"""A small HTTP proxy for the soak (bench/soak.py): round-robin over web backends, a dead backend marked down.

    python bench/soak_proxy.py --listen 127.0.0.1:PORT --backend 127.0.0.1:A --backend 127.0.0.1:B

Each request goes to the next backend that is up, with `X-Forwarded-Proto: https` set (the client's own
dropped), as the TLS proxy of docs/deploying.md step 7 would. A backend that refuses the connection is marked
down for DOWN_SECONDS and the request goes to the next one: nothing was sent, so this is safe for any method.
A backend that fails after the request was sent (reset, timeout) is marked down too, and the client gets 502
`backend_failed` (a write may or may not have been applied: the client decides whether to retry). With every
backend down the answer is 503 `no_backend` with `Retry-After`. Each change of a backend's state is logged on
stdout with a timestamp. Loopback only; not a production proxy.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DOWN_SECONDS = 1.0
BACKEND_TIMEOUT = 30.0
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def log(message: str) -> None:
    print(f"{datetime.now(UTC).isoformat(timespec='milliseconds')} proxy: {message}", flush=True)


class Backends:
    """Round-robin over (host, port), skipping those marked down until their time is up."""

    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self.down_until = [0.0] * len(backends)
        self.next = 0
        self.lock = threading.Lock()

    def order(self) -> list[int]:
        """Backend indexes to try, the round-robin's next first, those up before those down."""
        with self.lock:
            start = self.next
            self.next = (self.next + 1) % len(self.backends)
        now = time.monotonic()
        ring = [(start + i) % len(self.backends) for i in range(len(self.backends))]
        return [i for i in ring if self.down_until[i] <= now]

    def mark_down(self, index: int, why: str) -> None:
        with self.lock:
            was_up = self.down_until[index] <= time.monotonic()
            self.down_until[index] = time.monotonic() + DOWN_SECONDS
        if was_up:
            host, port = self.backends[index]
            log(f"backend {host}:{port} marked down ({why})")

    def mark_up(self, index: int) -> None:
        if self.down_until[index]:
            with self.lock:
                was_down, self.down_until[index] = self.down_until[index] != 0.0, 0.0
            if was_down:
                host, port = self.backends[index]
                log(f"backend {host}:{port} answers again")


def make_handler(backends: Backends) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, code: str, detail: str) -> None:
            payload = json.dumps({"code": code, "detail": detail}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status == 503:
                self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(payload)

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers = {k: v for k, v in headers.items() if k.lower() != "x-forwarded-proto"}
            headers["X-Forwarded-Proto"] = "https"
            for index in backends.order():
                host, port = backends.backends[index]
                connection = http.client.HTTPConnection(host, port, timeout=BACKEND_TIMEOUT)
                try:
                    try:
                        connection.connect()
                    except OSError as exc:
                        backends.mark_down(index, type(exc).__name__)
                        continue
                    try:
                        connection.request(self.command, self.path, body=body, headers=headers)
                        response = connection.getresponse()
                        payload = response.read()
                    except (OSError, http.client.HTTPException) as exc:
                        backends.mark_down(index, f"{type(exc).__name__} after the request was sent")
                        self._answer(502, "backend_failed", f"{host}:{port} failed mid-request")
                        return
                finally:
                    connection.close()
                backends.mark_up(index)
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self._answer(503, "no_backend", "every web backend is down")

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--listen", required=True, type=address)
    parser.add_argument("--backend", required=True, action="append", type=address)
    options = parser.parse_args(argv)
    backends = Backends(options.backend)
    server = ThreadingHTTPServer(options.listen, make_handler(backends))
    server.daemon_threads = True
    log(f"listening on {options.listen[0]}:{options.listen[1]}, backends {options.backend}")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
