"""docs/deploying.md, run as written, then driven over HTTP (`make deploy-check`, run by `.ci/run`).

The recipe is not copied here: this script reads the marked blocks (`<!-- deploy:NAME -->` before a ```sh
block) out of docs/deploying.md (the page's recipe, before its first `##` section) and runs each one, in order,
with bash, from the repository with `.venv/bin` first on PATH. Only step 0 (`deploy:values`, the operator's own values) is not run: this script
gives the same variables throwaway values instead (a new database and two new roles on the server
`bin/ensure-postgres` found, loopback Redis, a free port, a temporary VAR_DIR), and fails if step 0 names any
other variable. What a block exports carries over to the next ones. Blocks marked `deploy:service NAME` are
started in the background (gunicorn, a Celery worker, beat) and stopped at the end.

Then, over HTTP through gunicorn (as a TLS proxy would forward it: `X-Forwarded-Proto: https`):
1. the recipe's admin signs in on the dashboard;
2. agents of two tenants write the same fact key and each reads back only its own value and records;
3. the database is read with raw SQL as the app role: only the tenant named by the session, nothing with none,
   for a tenant table and a link table alike;
4. a fact under a field policy with a canonical source (on loopback) is rechecked by beat's sweep on the worker;
5. a subject deletion is followed to `purge_confirmed_at`, and the other tenant's fact is untouched.

Extra variables this script sets, each one an operator's documented choice (docs/operations.md "Configuration"):
RECHECK_SWEEP_SECONDS (beat's sweep every 2 s, not 60), SOURCE_ALLOWED_NETWORKS=127.0.0.1/32 (the test's
canonical source is on loopback), and a queue name and cache key prefix of this run (Redis is shared with other
runs on this machine). Everything it made is dropped at the end. Exits non-zero, naming the step, on any failure.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "deploying.md"
BLOCK = re.compile(
    r"<!-- deploy:(?:service (?P<service>[a-z]+)|(?P<name>[a-z-]+)) -->\n(?P<indent>[ ]*)```sh\n(?P<code>.*?)\n(?P=indent)```",
    re.S,
)
EXPORTED = re.compile(r"\b([A-Z][A-Z0-9_]*)=")
WAIT = float(os.environ.get("DEPLOY_CHECK_TIMEOUT", "180"))


class CheckFailed(Exception):
    pass


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


@dataclass(frozen=True)
class Block:
    name: str
    service: str | None
    code: str


def recipe(text: str) -> list[Block]:
    """The marked blocks of docs/deploying.md's recipe (the page up to its first `##` section), in order."""
    expect(text.startswith("# Deploying\n"), "docs/deploying.md: the page must start with its title, # Deploying")
    end = text.find("\n## ")
    part = text if end < 0 else text[:end]
    blocks = [
        Block(m["name"] or m["service"], m["service"], textwrap.dedent(m["indent"] + m["code"]).strip() + "\n")
        for m in BLOCK.finditer(part)
    ]
    names = [b.name for b in blocks]
    expect(names[:1] == ["values"], f"docs/deploying.md: the first marked block must be deploy:values, not {names[:1]}")
    expect(len(set(names)) == len(names), f"docs/deploying.md: a block name is used twice: {names}")
    outside = text.count("<!-- deploy:") - text[: len(part)].count("<!-- deploy:")
    expect(outside == 0, f"docs/deploying.md: {outside} marked block(s) after the recipe, in a `##` section: never run")
    return blocks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool_output(*command: str) -> str:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    expect(done.returncode == 0, f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def throwaway_values(var_dir: Path) -> dict[str, str]:
    """Step 0's variables, for a run that must not touch anything else on this machine."""
    server = urlsplit(os.environ.get("DEPLOY_CHECK_POSTGRES") or tool_output("bin/ensure-postgres"))
    redis = os.environ.get("DEPLOY_CHECK_REDIS") or tool_output("bin/ensure-redis")
    expect(bool(redis), "no Redis: the recipe's broker and cache (bin/ensure-redis found none)")
    tag = f"dc{os.getpid()}"
    return {
        "PGHOST": server.hostname or "127.0.0.1",
        "PGPORT": str(server.port or 5432),
        "PGSUPERUSER": server.username or "postgres",
        "DB_NAME": f"memory_admin_{tag}",
        "OWNER_ROLE": f"{tag}_owner",
        "APP_ROLE": f"{tag}_app",
        "OWNER_PASSWORD": secrets.token_hex(16),
        "APP_PASSWORD": secrets.token_hex(16),
        "REDIS_URL": redis.rstrip("/"),
        "WEB_BIND": f"127.0.0.1:{free_port()}",
        "VAR_DIR": str(var_dir),
        "SECRET_KEY": secrets.token_urlsafe(60),
        "ALLOWED_HOSTS": "127.0.0.1",
        "ADMIN_PASSWORD": "deploy check " + secrets.token_hex(8),
    }


def base_environment(values: dict[str, str]) -> dict[str, str]:
    """A clean process environment: nothing of the caller's Django, database, broker or cache settings."""
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "LOGNAME", "SHELL", "TERM")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env.update(values)
    tag = f"deploy-check-{os.getpid()}"
    env.update(
        RECHECK_SWEEP_SECONDS="2",
        SOURCE_ALLOWED_NETWORKS="127.0.0.1/32",
        CELERY_TASK_DEFAULT_QUEUE=tag,
        CACHE_KEY_PREFIX=tag,
        WEB_CONCURRENCY="2",
    )
    return env


def run_block(block: Block, env: dict[str, str], log: Path) -> dict[str, str]:
    """Run a block with bash (errors stop it); returns the environment it leaves (its exports carry over)."""
    with tempfile.NamedTemporaryFile(prefix="deploy-env-", delete=False) as out:
        env_file = Path(out.name)
    script = f"set -euo pipefail\n{block.code}\nenv -0 > {env_file}\n"
    started = time.monotonic()
    with log.open("ab") as sink:
        sink.write(f"\n$ # deploy:{block.name}\n{block.code}".encode())
        sink.flush()
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, stdout=sink, stderr=sink, timeout=600)
    try:
        expect(done.returncode == 0, f"step deploy:{block.name} exited {done.returncode}:\n{tail(log)}")
        left = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
    finally:
        env_file.unlink(missing_ok=True)
    print(f"deploy-check: deploy:{block.name} ran ({time.monotonic() - started:.1f} s)", flush=True)
    return left


def tail(log: Path, size: int = 3000) -> str:
    return log.read_text(errors="replace")[-size:] if log.exists() else ""


class Services:
    """The recipe's long-running blocks, each in its own process group."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, block: Block, env: dict[str, str]) -> None:
        log = (self.logs / f"{block.service}.log").open("ab")
        self.running[block.service or block.name] = subprocess.Popen(
            ["bash", "-c", f"exec {block.code.strip()}"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        print(f"deploy-check: deploy:service {block.name} started", flush=True)

    def alive(self) -> None:
        for name, process in self.running.items():
            expect(process.poll() is None, f"{name} exited {process.returncode}:\n{tail(self.logs / f'{name}.log')}")

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in self.running.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Web:
    """HTTP to gunicorn as a TLS proxy forwards it (X-Forwarded-Proto: https), keeping cookies by hand: the
    production profile's cookies are Secure, which a cookie jar would not send back over plain http."""

    def __init__(self, bind: str) -> None:
        host, port = bind.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.origin = f"https://{host}:{port}"
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, *, form: dict[str, str] | None = None, body: Any = None, token: str = ""
    ) -> tuple[int, str, str]:
        headers = {"X-Forwarded-Proto": "https", "Host": f"{self.host}:{self.port}", "Referer": self.origin + "/"}
        payload = None
        if form is not None:
            payload, headers["Content-Type"] = urlencode(form), "application/x-www-form-urlencoded"
        elif body is not None:
            payload, headers["Content-Type"] = json.dumps(body), "application/json"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            if method != "GET" and "csrftoken" in self.cookies:
                headers["X-CSRFToken"] = self.cookies["csrftoken"]
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", "replace")
        finally:
            connection.close()
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                name, _, rest = value.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response.status, response.getheader("Location") or "", text

    def api(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        status, _, text = self.request(method, path, body=body, token=token)
        try:
            return status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return status, text[:500]


def wait_until(what: str, check: Any, services: Services, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        services.alive()
        try:
            last = check()
        except (OSError, http.client.HTTPException) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.5)
    raise CheckFailed(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def manage(env: dict[str, str], *args: str) -> str:
    """A documented management command, as the app role (the environment the recipe left)."""
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    expect(done.returncode == 0, f"manage.py {' '.join(args[:1])} failed: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def canonical_source() -> Iterator[tuple[str, list[str]]]:
    """A canonical source on loopback answering {"price": 120, "revision": "r1"}; yields its URL and the paths
    it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            payload = json.dumps({"price": 120, "revision": "r1"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


FACT = {"project_id": "project-a", "subject_id": "task-1", "predicate": "submission_deadline"}


def fact_body(value: str, revision: str, **extra: Any) -> dict[str, Any]:
    return {
        **FACT,
        "value": value,
        "valid_from": datetime.now(UTC).isoformat(),
        "source": {"canonical_ref": "task-system:project-a/task-1", "revision": revision},
        **extra,
    }


def drive(env: dict[str, str], services: Services) -> None:
    web = Web(env["WEB_BIND"])
    wait_until("the sign-in page", lambda: web.request("GET", "/login/")[0] == 200, services)

    # People and agents, with the documented command (docs/operations.md "API tokens"), as the app role.
    acme = manage(env, "create_principal", "--tenant", "acme", "--name", "agent-7", "--role", "agent")
    globex = manage(env, "create_principal", "--tenant", "globex", "--name", "agent-9", "--role", "agent")
    admin = manage(env, "create_principal", "--tenant", "acme", "--name", "ada", "--role", "admin")
    carl = manage(env, "create_principal", "--tenant", "acme", "--name", "carl", "--role", "compliance")
    print("deploy-check: principals and tokens created (manage.py create_principal)", flush=True)

    # 1. The recipe's admin signs in.
    status, _, page = web.request("GET", "/login/")
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    expect(status == 200 and found is not None, f"GET /login/ answered {status} without a CSRF field")
    assert found is not None
    login = {"csrfmiddlewaretoken": found[1], "username": "ada@acme", "password": env["ADMIN_PASSWORD"]}
    status, location, _ = web.request("POST", "/login/", form=login)
    expect(status == 302 and "/login" not in location, f"sign-in answered {status} to {location!r}")
    status, _, page = web.request("GET", "/")
    expect(status == 200 and 'name="password"' not in page, f"the overview answered {status} after sign-in")
    print("deploy-check: the admin signed in; the overview answers 200", flush=True)

    # 2. Two tenants, the same fact key: each sees its own value and records only.
    mine = {}
    for token, value in ((acme, "2026-11-02T17:00:00+09:00"), (globex, "2026-12-24T12:00:00+09:00")):
        status, answer = web.api("POST", "/api/v1/records/", token, fact_body(value, "r1"))
        expect(status == 201, f"POST /api/v1/records/ answered {status}: {answer}")
        mine[token] = answer
        status, current = web.api("GET", "/api/v1/facts/current/?" + urlencode({**FACT, "purpose": "answer"}), token)
        expect(status == 200 and current["value"] == value, f"facts/current answered {status}: {current}")
        status, listed = web.api("GET", "/api/v1/records/?project_id=project-a", token)
        expect(
            status == 200 and [r["memory_id"] for r in listed["results"]] == [answer["memory_id"]],
            f"the records list of one tenant shows {listed}",
        )
        status, summary = web.api(
            "POST",
            "/api/v1/summaries/",
            token,
            {
                "project_id": "project-a",
                "text": "Due soon.",
                "derived_from": [{"memory_id": answer["memory_id"], "revision": 1}],
            },
        )
        expect(status == 201, f"POST /api/v1/summaries/ answered {status}: {summary}")
    print("deploy-check: two tenants wrote the same fact key; each reads only its own", flush=True)

    # 3. Raw SQL as the app role: the database keeps the tenants apart.
    import psycopg

    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as sql:
        role = sql.execute("SELECT current_user, rolbypassrls FROM pg_roles WHERE rolname = current_user").fetchone()
        expect(role == (env["APP_ROLE"], False), f"connected as {role}")
        for table in ("memory_memoryrecord", "derived_summarybase"):
            expect(sql.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), f"{table}: rows with no tenant set")
        tenants: dict[str, int] = dict(sql.execute("SELECT slug, id FROM accounts_tenant").fetchall())
        for slug, token in (("acme", acme), ("globex", globex)):
            sql.execute("SELECT set_config('app.tenant_id', %s, false)", [str(tenants[slug])])
            rows = sql.execute("SELECT memory_id, tenant_id FROM memory_memoryrecord").fetchall()
            expect(rows == [(mine[token]["memory_id"], tenants[slug])], f"{slug} sees {rows}")
            bases = sql.execute("SELECT count(*) FROM derived_summarybase").fetchone()
            expect(bases == (1,), f"{slug} sees {bases} summary bases")
    print("deploy-check: raw SQL as the app role sees only the session's tenant (records, summary bases)", flush=True)

    # 4. A recheck through beat: the sweep claims the due fact and the worker asks its canonical source.
    with canonical_source() as (source, asked):
        policy = {
            "project_id": "project-a",
            "predicate": "contract_price",
            "authorized_issuers": ["agent-7"],
            "canonical_ref_prefix": "crm:",
            "canonical_source": {
                "connector": "http_json",
                "url_template": source + "/prices/{subject_id}",
                "value_pointer": "/price",
                "revision_pointer": "/revision",
                "timeout_seconds": 2,
            },
            "recheck_interval": "PT2S",
            "recheck_before_action": False,
            "on_failure": "answer_with_caveat",
            "risk": "low",
        }
        status, answer = web.api("POST", "/api/v1/field-policies/", admin, policy)
        expect(status == 201, f"POST /api/v1/field-policies/ answered {status}: {answer}")
        price = {
            "project_id": "project-a",
            "subject_id": "deal-9",
            "predicate": "contract_price",
            "value": 120,
            "valid_from": datetime.now(UTC).isoformat(),
            "source": {"canonical_ref": "crm:deal-9", "revision": "r1"},
        }
        status, answer = web.api("POST", "/api/v1/records/", acme, price)
        expect(status == 201, f"POST /api/v1/records/ (contract_price) answered {status}: {answer}")
        query = "/api/v1/facts/current/?" + urlencode(
            {"project_id": "project-a", "subject_id": "deal-9", "predicate": "contract_price", "purpose": "answer"}
        )

        def verified() -> Any:
            status, current = web.api("GET", query, acme)
            return status == 200 and current.get("last_verified_at") and current

        current = wait_until("a recheck by beat's sweep on the worker", verified, services)
        expect("/prices/deal-9" in asked, f"the canonical source was asked for {asked}")
    print(f"deploy-check: beat's sweep rechecked the fact (last verified {current['last_verified_at']})", flush=True)

    # 5. A subject deletion, carried by the worker to a confirmed purge; the other tenant keeps its fact.
    request = {"project_id": "project-a", "scope": {"subject_id": "task-1"}, "reason": "Deploy check."}
    status, preview = web.api("POST", "/api/v1/deletion-requests/", carl, {**request, "dry_run": True})
    expect(status == 200, f"the deletion's dry run answered {status}: {preview}")
    if preview.get("preview_id"):
        request["preview_id"] = preview["preview_id"]
    status, filed = web.api("POST", "/api/v1/deletion-requests/", carl, request)
    expect(status == 202, f"filing the deletion answered {status}: {filed}")

    def confirmed() -> Any:
        status, report = web.api("GET", f"/api/v1/deletion-requests/{filed['id']}/", carl)
        return status == 200 and report["stages"]["purge_confirmed_at"] and report

    report = wait_until("the deletion's purge confirmation", confirmed, services)
    stages = report["stages"]
    order = [datetime.fromisoformat(stages[k]) for k in ("accepted_at", "removed_from_reads_at", "purge_confirmed_at")]
    expect(order == sorted(order), f"stages out of order: {stages}")
    status, listed = web.api("GET", "/api/v1/records/?project_id=project-a&subject_id=task-1", acme)
    expect(status == 200 and listed["results"] == [], f"acme still lists task-1: {listed}")
    status, listed = web.api("GET", "/api/v1/records/?project_id=project-a&subject_id=task-1", globex)
    expect(status == 200 and len(listed["results"]) == 1, f"globex lost its task-1: {listed}")
    print(f"deploy-check: the subject deletion reached purge_confirmed_at ({stages['purge_confirmed_at']})", flush=True)


def drop_everything(values: dict[str, str]) -> None:
    import psycopg
    from psycopg import sql

    url = f"postgres://{values['PGSUPERUSER']}@{values['PGHOST']}:{values['PGPORT']}/postgres"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(values["DB_NAME"])))
        for role in (values["APP_ROLE"], values["OWNER_ROLE"]):
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def check_values_block(block: Block, values: dict[str, str]) -> None:
    named = set(EXPORTED.findall(block.code))
    expect(
        named == set(values),
        f"docs/deploying.md: step 0 names {sorted(named)}; this check gives values to {sorted(values)}: "
        "make them the same",
    )


def main() -> int:
    try:
        blocks = recipe(RECIPE.read_text())
    except CheckFailed as failure:
        print(f"deploy-check FAILED: {failure}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="deploy-check-"))
    values = throwaway_values(work / "var")
    logs = work / "logs"
    logs.mkdir()
    services = Services(logs)
    started = time.monotonic()
    print(f"deploy-check: {len(blocks)} blocks from docs/deploying.md; logs in {logs}", flush=True)
    try:
        check_values_block(blocks[0], values)
        env = base_environment(values)
        for block in blocks[1:]:
            if block.service:
                services.start(block, env)
            else:
                env = run_block(block, env, logs / "steps.log")
        drive(env, services)
        services.alive()
    except CheckFailed as failure:
        print(f"deploy-check FAILED: {failure}", file=sys.stderr)
        for name in services.running:
            print(f"--- {name}.log (tail) ---\n{tail(logs / f'{name}.log')}", file=sys.stderr)
        return 1
    finally:
        services.stop()
        drop_everything(values)
    print(f"deploy-check: the recipe deployed and passed every check in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
