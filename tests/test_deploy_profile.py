"""The production profile (docs/deploying.md), exercised as far as one machine can: `check --deploy` under
DEBUG=0, and gunicorn started with the documented command and variables on a loopback port, reading the
test database, serving the collected static files through whitenoise, behind a (simulated) TLS proxy."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.cookies import SimpleCookie
from pathlib import Path
from typing import cast
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.template.loader import get_template
from django.test import Client

from memory_admin.accounts.services import ensure_principal
from tests.celery_worker import _test_database_url

ROOT = Path(__file__).resolve().parent.parent
HTMX = "/static/vendor/htmx-2.0.11.min.js"
SECRET_SUBJECT = "subject-in-the-query-4711"


def _production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What docs/deploying.md tells an operator to set, pointed at this test's database and folders."""
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(60),
        "ALLOWED_HOSTS": "127.0.0.1",
        "VAR_DIR": str(tmp_path / "var"),
        "STATIC_ROOT": str(tmp_path / "static"),
        "VECTOR_INDEX_PATH": str(tmp_path / "vectors"),
        "CACHE_URL": "locmem://",
        # The test talks to gunicorn directly and says, as a TLS proxy would, that the client used https.
        "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(extra)
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


def test_check_deploy_reports_nothing_under_the_production_profile(tmp_path: Path) -> None:
    # Settings are read at import, so the check runs in a process of its own with the production variables.
    done = _manage(_production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def test_check_deploy_warns_on_the_local_default(tmp_path: Path) -> None:
    """The control: the same check under `make run`'s defaults fails, so the test above is not vacuous."""
    env = _production_env(tmp_path, DEBUG="1")
    done = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016", "security.W018"):
        assert warning in done.stdout + done.stderr, warning


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _gunicorn(env: dict[str, str], log_path: Path) -> Iterator[int]:
    port = _free_port()
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            # The command docs/deploying.md documents, with one worker and a loopback port.
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:memory_admin.gunicorn_conf",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
                "memory_admin.wsgi",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if server.poll() is not None:
                    pytest.fail(f"gunicorn exited with {server.returncode}:\n{log_path.read_text()}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"gunicorn did not listen within 60 s:\n{log_path.read_text()}")
                    time.sleep(0.2)
            yield port
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    assert server.returncode is not None  # stopped


class _Http:
    def __init__(self, port: int) -> None:
        self.port = port

    def request(
        self,
        method: str,
        path: str,
        *,
        https: bool = True,
        body: str | None = None,
        headers: dict[str, str] | None = None,
        chunked: bool = False,
    ) -> tuple[http.client.HTTPResponse, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = dict(headers or {})
        if https:
            sent["X-Forwarded-Proto"] = "https"
        if chunked:  # the body as an iterable: http.client frames it with Transfer-Encoding: chunked, no length
            connection.request(method, path, body=iter([(body or "").encode()]), headers=sent, encode_chunked=True)
        else:
            connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        return response, payload


def _cookie_attributes(response: http.client.HTTPResponse, name: str) -> dict[str, str]:
    for header in response.headers.get_all("Set-Cookie") or []:
        if header.startswith(f"{name}="):
            return {part.split("=")[0].strip().lower(): part for part in header.split(";")[1:]}
    raise AssertionError(f"no {name} cookie in {response.headers.get_all('Set-Cookie')}")


@pytest.mark.django_db(transaction=True)
def test_gunicorn_serves_the_production_profile(tmp_path: Path) -> None:
    # Committed (transaction=True), so the gunicorn process sees the person who signs in.
    person = ensure_principal("acme", "olivia", ["owner"], password="a long pass phrase 42", validate=False)
    env = _production_env(tmp_path, DATABASE_URL=_test_database_url())
    collected = _manage(env, "collectstatic", "--noinput")
    assert collected.returncode == 0, collected.stderr
    assert (tmp_path / "static" / HTMX.removeprefix("/static/")).is_file()
    log_path = tmp_path / "gunicorn.log"

    with _gunicorn(env, log_path) as port:
        web = _Http(port)

        # Plain http is sent to https; https answers carry HSTS (only there: browsers ignore it over http).
        response, _ = web.request("GET", "/login/", https=False)
        assert response.status == 301
        assert response.headers["Location"] == f"https://127.0.0.1:{port}/login/"
        assert "Strict-Transport-Security" not in response.headers

        response, body = web.request("GET", "/login/")
        assert response.status == 200
        assert b"Sign in" in body
        assert HTMX.encode() in body
        assert response.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
        policy = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
        csrf = _cookie_attributes(response, "csrftoken")
        assert {"secure", "httponly", "samesite"} <= csrf.keys()
        token = SimpleCookie(response.headers["Set-Cookie"])["csrftoken"].value
        form_token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', body)
        assert form_token is not None

        # Signing in over "https" (the Referer is checked for secure requests) sets a Secure, HttpOnly session.
        response, _ = web.request(
            "POST",
            "/login/",
            body=urlencode(
                {
                    "username": person.username,
                    "password": "a long pass phrase 42",
                    "csrfmiddlewaretoken": form_token.group(1).decode(),
                }
            ),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"csrftoken={token}",
                "Referer": f"https://127.0.0.1:{port}/login/",
            },
        )
        assert response.status == 302, response.headers
        session = _cookie_attributes(response, settings.SESSION_COOKIE_NAME)
        assert {"secure", "httponly", "samesite"} <= session.keys()

        # The API answers in its JSON error shape, with DEBUG off, for a path nothing routes and for no token.
        response, body = web.request("GET", "/api/v1/no-such-endpoint/")
        assert response.status == 404
        assert response.headers["Content-Type"] == "application/json"
        assert b'"code": "not_found"' in body or b'"code":"not_found"' in body
        response, body = web.request("GET", f"/api/v1/facts/current/?project_id=p&subject_id={SECRET_SUBJECT}")
        assert response.status == 401
        assert response.headers["Content-Type"].startswith("application/json")

        # A body framed by Transfer-Encoding (chunked) with no Content-Length used to be read as empty (issue 30,
        # item 8): the API and MCP answer 411 in their JSON shape, the dashboard a page; nothing reads it as {}.
        record = '{"project_id": "p", "subject_id": "s", "predicate": "x", "value": 1}'
        mcp_call = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
        for path, payload in (("/api/v1/records/", record), ("/mcp/", mcp_call), ("/login/", "username=x")):
            response, body = web.request(
                "POST", path, body=payload, headers={"Content-Type": "application/json"}, chunked=True
            )
            assert response.status == 411, (path, response.status, body[:300])
            if path != "/login/":
                assert b'"length_required"' in body and b"Content-Length" in body
            else:
                assert b"Content-Length" in body
        # The same body with its length is read (and refused for its missing token, not for being empty).
        response, body = web.request(
            "POST", "/api/v1/records/", body=record, headers={"Content-Type": "application/json"}
        )
        assert response.status == 401, body

        # whitenoise serves the collected htmx, cacheable, with the same headers.
        response, body = web.request("GET", HTMX)
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/javascript")
        assert body.startswith(b"var htmx") or b"htmx" in body[:200]
        assert response.headers["X-Content-Type-Options"] == "nosniff"

        # Swagger UI loads its start-up script as a file: no inline script for the policy to refuse.
        response, body = web.request("GET", "/api/v1/docs/")
        assert response.status == 200
        assert "'unsafe-inline'" not in response.headers["Content-Security-Policy"]
        script = re.search(rb'<script src="([^"]*\?[^"]*script=[^"]*)"', body)
        assert script is not None, body
        response, body = web.request("GET", script.group(1).decode().replace("&amp;", "&"))
        assert response.status == 200
        assert b"SwaggerUIBundle" in body

    # The access log names paths, never the query string that carried the subject id.
    log = log_path.read_text()
    assert '"GET /api/v1/facts/current/ HTTP/1.1" 401' in log, log
    assert SECRET_SUBJECT not in log
    assert "project_id=" not in log


def _inline_style_hash(css: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(css.encode()).digest()).decode() + "'"


@pytest.mark.parametrize(
    "template",
    [
        "400.html",
        "403.html",
        "404.html",
        "500.html",
        "drf_spectacular/swagger_ui.html",
    ],
)
def test_every_inline_style_block_is_allowed_by_its_hash(template: str) -> None:
    """A changed <style> block would be refused by browsers under the CSP: this fails first."""
    source = Path(get_template(template).origin.name).read_text()  # type: ignore[attr-defined]
    blocks = re.findall(r"<style>(.*?)</style>", source, re.S)
    assert blocks, template
    for css in blocks:
        assert _inline_style_hash(css) in cast(list[str], settings.SECURE_CSP["style-src"]), template


def test_no_template_has_inline_script_handlers_or_style_attributes() -> None:
    offending = []
    for path in (ROOT / "templates").rglob("*.html"):
        text = path.read_text()
        for pattern in (r"<script(?![^>]*\bsrc=)[^>]*>", r"\son[a-z]+\s*=", r"\sstyle\s*=", r"\shx-on", r"javascript:"):
            if re.search(pattern, text, re.I):
                offending.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert offending == []


@pytest.mark.django_db
def test_error_pages_and_the_report_are_served_with_the_policy(client: Client) -> None:
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    policy = response.headers["Content-Security-Policy"]
    css = re.search(r"<style>(.*?)</style>", response.content.decode(), re.S)
    assert css is not None and _inline_style_hash(css.group(1)) in policy
