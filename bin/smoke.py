"""The newcomer's path, end to end: `bin/run` on a fresh, throwaway `var/`, then everything over HTTP.

1. start `bin/run` (SQLite, filesystem broker, a real Celery worker, the web server) on a free port, in its own
   process group, with the environment a newcomer has (no DATABASE_URL, broker or cache settings);
2. wait until the sign-in page answers;
3. sign in as each demo human and load every page in the navigation (and the API docs);
4. call the API with the agent token `make run` printed;
5. as compliance, preview and file a subject deletion through the API, another one through the pages, and follow
   both to `purge_confirmed_at` (the worker does the purge);
6. stop every process it started.

Any failed step exits non-zero with the step and the tail of the server's log. Run by `make smoke` and `.ci/run`.
Only loopback is contacted.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HUMANS = ("owner@demo", "compliance@demo", "admin@demo")
PASSWORD = "demo"
START_TIMEOUT = float(os.environ.get("SMOKE_START_TIMEOUT", "300"))
PURGE_TIMEOUT = float(os.environ.get("SMOKE_PURGE_TIMEOUT", "180"))


class SmokeFailure(Exception):
    pass


MOVED = "2026-11-02T17:00:00+09:00"  # the demo's moved deadline, as the API answers it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Forms(HTMLParser):
    """Collects each form's action, method, inputs (name → value) and submit buttons, and every link."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self.links: list[str] = []
        self._form: dict[str, Any] | None = None
        self._nav = 0
        self.nav_links: list[str] = []
        self._textarea: str | None = None
        self._select: str | None = None
        self._button: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "nav":
            self._nav += 1
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
            if self._nav:
                self.nav_links.append(a["href"])
        if tag == "form":
            self._form = {
                "action": a.get("action", ""),
                "method": a.get("method", "get").lower(),
                "inputs": {},
                "buttons": [],
            }
            self.forms.append(self._form)
        if self._form is None:
            return
        if tag == "input" and a.get("name"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self._form["inputs"][a["name"]] = a.get("value", "")
        if tag == "textarea" and a.get("name"):
            self._textarea = a["name"]
            self._form["inputs"][a["name"]] = ""
        if tag == "select" and a.get("name"):
            self._select = a["name"]
        if tag == "option" and self._select and ("selected" in a or self._select not in self._form["inputs"]):
            self._form["inputs"][self._select] = a.get("value", "")
        if tag == "button":
            self._button = {**a, "text": ""}
            self._form["buttons"].append(self._button)

    def handle_data(self, data: str) -> None:
        if self._form is not None and self._textarea:
            self._form["inputs"][self._textarea] += data
        if self._button is not None:
            self._button["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav":
            self._nav -= 1
        if tag == "textarea":
            self._textarea = None
        if tag == "button":
            self._button = None
        if tag == "select":
            self._select = None
        if tag == "form":
            self._form = None


def says(button: dict[str, str], word: str) -> bool:
    """Whether a button's name, value, label or test id mentions `word`."""
    return word in " ".join(button.values()).lower()


def parse(html: str) -> Forms:
    forms = Forms()
    forms.feed(html)
    return forms


class Browser:
    """A cookie-keeping HTTP client for loopback, like a browser without JavaScript."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def request(
        self,
        method: str,
        path: str,
        data: dict[str, Any] | None = None,
        *,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str, str]:
        url = urllib.parse.urljoin(self.base, path)
        body = None
        all_headers = {"Referer": self.base + "/", **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        elif data is not None:
            body = urllib.parse.urlencode(data, doseq=True).encode()
            all_headers["Content-Type"] = "application/x-www-form-urlencoded"
        csrf = self.cookie("csrftoken")
        if csrf and method != "GET":
            all_headers["X-CSRFToken"] = csrf
        req = urllib.request.Request(url, data=body, method=method, headers=all_headers)
        try:
            with self.opener.open(req, timeout=60) as response:
                return response.status, response.geturl(), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, url, exc.read().decode("utf-8", "replace")

    def cookie(self, name: str) -> str | None:
        return next((c.value for c in self.jar if c.name == name), None)

    def get(self, path: str) -> tuple[int, str, str]:
        return self.request("GET", path)


def expect(condition: bool, step: str) -> None:
    if not condition:
        raise SmokeFailure(step)


def sign_in(base: str, login: str) -> Browser:
    browser = Browser(base)
    status, _, html = browser.get("/login/")
    expect(status == 200, f"GET /login/ answered {status}")
    form = next(f for f in parse(html).forms if "username" in f["inputs"] or "password" in f["inputs"])
    fields = {**form["inputs"], "username": login, "password": PASSWORD}
    status, url, html = browser.request("POST", "/login/", fields)
    expect(status == 200 and not url.rstrip("/").endswith("/login"), f"sign-in as {login} failed ({status} at {url})")
    return browser


def load_navigation(browser: Browser, login: str) -> list[str]:
    status, _, html = browser.get("/")
    expect(status == 200, f"{login}: overview answered {status}")
    pages = [h for h in dict.fromkeys(parse(html).nav_links) if h.startswith("/") and not h.startswith("/admin")]
    expect(len(pages) >= 8, f"{login}: the navigation has only {pages}")
    for path in pages:
        status, _, _ = browser.get(path)
        expect(status == 200, f"{login}: GET {path} answered {status}")
    return pages


def follow_deletion(browser: Browser, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + PURGE_TIMEOUT
    report: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, _, text = browser.get(f"/api/v1/deletion-requests/{request_id}/")
        expect(status == 200, f"GET deletion {request_id} answered {status}: {text[:300]}")
        report = json.loads(text)
        if report["stages"]["purge_confirmed_at"]:
            return report
        time.sleep(1)
    stores = [(s["store"], s["state"], s.get("last_error")) for s in report.get("stores", [])]
    raise SmokeFailure(f"deletion {request_id} not purge-confirmed in {PURGE_TIMEOUT:.0f}s; stores: {stores}")


def delete_through_api(browser: Browser, subject: str) -> dict[str, Any]:
    body = {"project_id": "project-a", "scope": {"subject_id": subject}, "reason": "smoke test", "dry_run": True}
    status, _, text = browser.request("POST", "/api/v1/deletion-requests/", json_body=body)
    expect(status == 200, f"deletion dry run answered {status}: {text[:500]}")
    preview = json.loads(text)
    records = next(s for s in preview["stores"] if s["store"] == "records")
    expect(records["found"] > 0, f"the dry run found no records of {subject}: {preview}")
    body["dry_run"] = False
    if preview.get("preview_id"):
        body["preview_id"] = preview["preview_id"]
    status, _, text = browser.request("POST", "/api/v1/deletion-requests/", json_body=body)
    expect(status == 202, f"filing the deletion answered {status}: {text[:500]}")
    report = follow_deletion(browser, json.loads(text)["id"])
    status, _, text = browser.get(f"/api/v1/records/?project_id=project-a&subject_id={subject}")
    expect(status == 200 and not json.loads(text)["results"], f"records of {subject} still listed: {text[:300]}")
    return report


def delete_through_pages(browser: Browser, subject: str) -> dict[str, Any]:
    status, _, html = browser.get("/deletions/new/")
    expect(status == 200, f"/deletions/new/ answered {status}")
    form = next(f for f in parse(html).forms if "scope_value" in f["inputs"])
    fields = {
        **form["inputs"],
        "project_id": "project-a",
        "scope_kind": "subject_id",
        "scope_value": subject,
        "reason": "smoke test through the pages",
    }
    preview_button: dict[str, str] = next((b for b in form["buttons"] if says(b, "preview")), {})
    if preview_button.get("name"):
        fields[preview_button["name"]] = preview_button.get("value", "")
    status, _, html = browser.request("POST", form["action"] or "/deletions/new/", fields)
    expect(status == 200, f"the page's dry-run preview answered {status}")
    expect("found" in html.lower() or "records" in html.lower(), "the preview page shows no counts")
    confirm = next((f for f in parse(html).forms for b in f["buttons"] if says(b, "confirm")), None)
    expect(confirm is not None, "the preview page offers no 'Confirm and file'")
    assert confirm is not None
    fields = dict(confirm["inputs"])
    button = next(b for b in confirm["buttons"] if says(b, "confirm"))
    if button.get("name"):
        fields[button["name"]] = button.get("value", "")
    status, url, html = browser.request("POST", confirm["action"] or "/deletions/new/", fields)
    match = re.search(r"/deletions/(del-[\w-]+)/", url) or re.search(r"/deletions/(del-[\w-]+)/", html)
    expect(status == 200 and match is not None, f"filing through the page answered {status} at {url}")
    assert match is not None
    report = follow_deletion(browser, match.group(1))
    status, _, _ = browser.get(f"/deletions/{match.group(1)}/")
    expect(status == 200, f"the deletion page answered {status}")
    return report


def integrations_answer(base: str, token: str, query: str) -> str:
    """The newcomer's integrations against this server with the printed token (docs/integrations.md "MCP server" and
    "Python client"): an MCP client over Streamable HTTP at /mcp/ and the Python client read the moved deadline."""
    import asyncio

    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client
    from memory_governance import Client as MemoryClient

    fact = dict(pair.split("=") for pair in query.split("&"))

    async def recall() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            async with McpClient(streamable_http_client(f"{base}/mcp/", http_client=http)) as client:
                return await client.call_tool("recall", fact)

    result = asyncio.run(recall())
    answer = result.structured_content or {}
    expect(not result.is_error and answer.get("value") == MOVED, f"MCP recall answered {answer}")
    with MemoryClient(base, token) as client:
        current = client.current(fact["project_id"], fact["subject_id"], fact["predicate"])
    expect(current["value"] == MOVED, f"the Python client read {current}")
    return "agent: MCP recall over /mcp/ and the Python client read the moved deadline"


def run_smoke(base: str, log: Path) -> None:
    steps: list[str] = []
    text = log.read_text(errors="replace")
    token_match = re.search(r"API token \(shown once\):\s*\n(\S+)", text)
    expect(token_match is not None, "make run printed no agent token")
    assert token_match is not None
    token = token_match.group(1)

    for login in HUMANS:
        browser = sign_in(base, login)
        pages = load_navigation(browser, login)
        steps.append(f"{login}: signed in, {len(pages)} pages loaded")
        status, _, _ = browser.get("/api/v1/docs/")
        expect(status == 200, f"{login}: API docs answered {status}")

    agent = Browser(base)
    auth = {"Authorization": f"Bearer {token}"}
    status, _, text = agent.request("GET", "/api/v1/records/?project_id=project-a", headers=auth)
    expect(status == 200 and json.loads(text)["results"], f"agent records list answered {status}: {text[:300]}")
    query = "project_id=project-a&subject_id=task-proposal-017&predicate=submission_deadline"
    status, _, text = agent.request("GET", f"/api/v1/facts/current/?{query}", headers=auth)
    expect(status == 200, f"facts/current answered {status}: {text[:300]}")
    expect(json.loads(text)["value"] == MOVED, f"the moved deadline is wrong: {text[:300]}")
    status, _, text = agent.request("GET", "/api/v1/search/?project_id=project-a&q=deadline&k=5", headers=auth)
    expect(status == 200, f"search answered {status}: {text[:300]}")
    steps.append("agent: records, facts/current and search answered")
    steps.append(integrations_answer(base, token, query))

    compliance = sign_in(base, "compliance@demo")
    report = delete_through_api(compliance, "person-sato")
    steps.append(f"API deletion {report['id']}: purge confirmed at {report['stages']['purge_confirmed_at']}")
    report = delete_through_pages(compliance, "agent-mailer")
    steps.append(f"page deletion {report['id']}: purge confirmed at {report['stages']['purge_confirmed_at']}")
    for step in steps:
        print(f"smoke: ok - {step}")


def main() -> int:
    var = Path(tempfile.mkdtemp(prefix="smoke-var-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "CACHE_URL",
            "VECTOR_INDEX_PATH",
            "REDIS_URL",
            "CELERY_TASK_DEFAULT_QUEUE",
            "CACHE_KEY_PREFIX",
            "BACKUP_DIR",
        }
    }
    env.update({"VAR_DIR": str(var), "PORT": str(port), "PYTHONUNBUFFERED": "1"})
    log = var / "smoke-run.log"
    started = time.monotonic()
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["bin/run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        while True:
            if server.poll() is not None:
                raise SmokeFailure(f"bin/run exited with {server.returncode} before serving")
            try:
                with urllib.request.urlopen(f"{base}/login/", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() - started > START_TIMEOUT:
                raise SmokeFailure(f"bin/run did not serve {base}/login/ within {START_TIMEOUT:.0f}s")
            time.sleep(1)
        print(f"smoke: bin/run serving on {base} after {time.monotonic() - started:.1f}s")
        run_smoke(base, log)
        print(f"smoke: passed in {time.monotonic() - started:.1f}s")
        return 0
    except (SmokeFailure, StopIteration, KeyError, ValueError) as exc:
        print(f"smoke: FAILED - {exc!r}", file=sys.stderr)
        for name in ("smoke-run.log", "celery.log"):
            path = var / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-60:]
                print(f"--- last lines of {name} ---", *tail, sep="\n", file=sys.stderr)
        return 1
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # the worker's children may outlive the group leader briefly
        time.sleep(1)
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(var, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
