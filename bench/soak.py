"""The scale-out soak under faults (`make soak`; issue 36, item 2). Loopback only, bounded in time and requests.

It starts its own throwaway services on free ports, nothing shared with the machine's:
- a PostgreSQL cluster (initdb in a temporary directory, tests/support/pg_cluster.py), with an owner role that
  migrates (naming the app role, as docs/deploying.md and `make deploy-check` do) and the app role every other
  process connects as;
- a Redis server (the broker and the cache; AOF on, so a restart keeps the broker's messages);
- two gunicorn instances (the production profile, DEBUG=0) behind bench/soak_proxy.py (round-robin, a dead backend
  marked down), two Celery workers and beat.

Two tenants. Load, for --seconds: per tenant, agents writing facts by compare-and-swap (read the revision, write
with expected_revision), an agent reading for action and searching, an owner opening and resolving disputes, and
compliance filing subject deletions (one before each fault, so a fault lands mid-purge). A write answered 5xx (or
not answered) is retried with the same body until it is answered: an idempotent repeat answers 200 with the
record already stored. Faults, in sequence, with a settle time between: kill -9 a worker (then start it again),
restart Redis, restart PostgreSQL, kill -9 a web instance (then start it again). Each outage has a window
[start, service back + GRACE_SECONDS].

Afterwards, as the owner (every tenant visible) from the database: every 2xx-acknowledged write is there exactly
once under the memory id it was answered with, no record a tenant read or wrote belongs to the other tenant, and
every deletion reaches purge_confirmed (waited for with a bound) with its stages in order and its subject's
records gone. Prints the per-outage 5xx counts and recovery times, the stage times, and as its last line:

    soak: acknowledged N, lost 0, duplicated 0, cross-tenant 0, 5xx outside outages 0, deletions confirmed M/M

Exits 1 when any of them is bad, 2 when the soak itself could not run. Every wait has a timeout and says what
it waits for; a watchdog ends the run (and every process it started) after --max-minutes; each phase is logged
with a timestamp. Run: `make soak` or `make soak SOAK_ARGS="--seconds 60"`.
"""

from __future__ import annotations

import argparse
import atexit
import faulthandler
import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python bench/x.py` puts bench/ first on sys.path, where bench/mcp.py would shadow the `mcp` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.soak_verify import (  # noqa: E402
    Failure,
    Outage,
    Read,
    Row,
    Verdict,
    Write,
    check_failures,
    check_reads,
    check_writes,
    statuses,
)
from tests.support.pg_cluster import PgCluster  # noqa: E402

PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
BIN = REPO_ROOT / ".venv" / "bin"
TENANTS = ("acme", "globex")
PROJECT = "soak"
PREDICATE = "status"
STARTED = time.monotonic()


def now() -> float:
    return time.monotonic() - STARTED


def say(message: str) -> None:
    print(f"{datetime.now(UTC).strftime('%H:%M:%S.%f')[:-3]} [{now():6.1f}s] {message}", flush=True)


class SoakError(Exception):
    pass


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.25) -> Any:
    """Poll `check` until it returns something true; says what it waits for, and fails after `timeout`."""
    say(f"waiting for {what} (at most {timeout:.0f} s)")
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # any failure of a probe means "not yet"
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise SoakError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int, token: str) -> bool:
    """Whether the web instance on `port` answers an API read (its workers booted), directly, within 5 s."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        query = urlencode({"project_id": PROJECT, "subject_id": "probe", "predicate": PREDICATE, "purpose": "answer"})
        headers = {"Authorization": f"Bearer {token}", "Host": "127.0.0.1", "X-Forwarded-Proto": "https"}
        connection.request("GET", f"/api/v1/facts/current/?{query}", headers=headers)
        return connection.getresponse().status in (200, 404)
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# --- Processes ---------------------------------------------------------------------------------------------


class Processes:
    """Every process the soak starts, each in a process group of its own; all of them killed on exit."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.lock = threading.Lock()

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        with self.lock:
            self.running[name] = process
            self.commands[name] = (command, env)
        say(f"started {name} (pid {process.pid})")
        return process

    def restart(self, name: str) -> subprocess.Popen[bytes]:
        command, env = self.commands[name]
        return self.start(name, command, env)

    def kill9(self, name: str) -> None:
        process = self.running[name]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        say(f"kill -9 {name} (process group {process.pid})")

    def dead(self) -> list[str]:
        return [name for name, p in self.running.items() if p.poll() is not None]

    def stop_all(self) -> None:
        with self.lock:
            processes = list(self.running.items())
        for _, process in processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        for _, process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass

    def tail(self, name: str, size: int = 2500) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else ""


class Redis:
    def __init__(self, processes: Processes, folder: Path) -> None:
        self.processes, self.folder, self.port = processes, folder, free_port()
        folder.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server")
        if binary is None:
            raise SoakError("redis-server is needed (Debian: apt-get install redis-server)")
        self.command = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> None:
        self.processes.start("redis", self.command, dict(os.environ))
        wait_for(f"redis-server on port {self.port} to answer PING", self.ping, 30)

    def stop(self) -> None:
        process = self.processes.running["redis"]
        process.terminate()  # a clean shutdown: the AOF is flushed (it is fsynced on every write anyway)
        process.wait(timeout=30)


# --- HTTP ----------------------------------------------------------------------------------------------------


@dataclass
class Ledger:
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    resolved: list[tuple[str, str, str]] = field(default_factory=list)  # tenant, dispute id, winner memory id
    deletions: list[tuple[str, str, str, float]] = field(default_factory=list)  # tenant, request id, subject, at
    requests: int = 0
    answered: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, status: int, path: str) -> None:
        with self.lock:
            self.requests += 1
            self.answered[status] += 1
            if status >= 500 or status == 0:
                self.failures.append(Failure(now(), status, path.split("?", 1)[0]))


class Client:
    def __init__(self, port: int, token: str, tenant: str, ledger: Ledger, stop: threading.Event) -> None:
        self.port, self.token, self.tenant, self.ledger, self.stop = port, token, tenant, ledger, stop

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
        """One request through the proxy: (status, JSON answer, Retry-After). Status 0: no answer at all."""
        headers = {"Authorization": f"Bearer {self.token}", "Host": "127.0.0.1"}
        payload = None
        if body is not None:
            payload, headers["Content-Type"] = json.dumps(body), "application/json"
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=45)
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", "replace")
            status, retry = response.status, float(response.getheader("Retry-After") or 0.5)
        except (OSError, http.client.HTTPException):
            status, text, retry = 0, "", 0.5
        finally:
            connection.close()
        self.ledger.count(status, path)
        try:
            answer = json.loads(text) if text else None
        except json.JSONDecodeError:
            answer = text[:300]
        return status, answer, retry

    def until_answered(self, method: str, path: str, body: Any = None, give_up: float = 120) -> tuple[int, Any]:
        """The same request again after each 5xx or lost connection (after its Retry-After, at most 2 s), until
        it is answered or `give_up` seconds have passed (then status 0)."""
        deadline = time.monotonic() + give_up
        while True:
            status, answer, retry = self.call(method, path, body)
            if 0 < status < 500 or time.monotonic() > deadline:
                return status, answer
            time.sleep(min(retry, 2.0))


def fact_body(subject: str, value: str, ref: str, revision: str, expected: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "project_id": PROJECT,
        "subject_id": subject,
        "predicate": PREDICATE,
        "value": value,
        "valid_from": datetime.now(UTC).isoformat(),
        "source": {"canonical_ref": ref, "revision": revision},
    }
    if expected is not None:
        body["expected_revision"] = expected
    return body


class Sequence:
    def __init__(self) -> None:
        self.value, self.lock = 0, threading.Lock()

    def next(self) -> int:
        with self.lock:
            self.value += 1
            return self.value


SEQ = Sequence()


def acknowledge(client: Client, body: dict[str, Any], status: int, answer: Any, deleted: bool = False) -> None:
    if status in (200, 201, 202) and isinstance(answer, dict) and answer.get("memory_id"):
        write = Write(
            client.tenant,
            body["project_id"],
            body["subject_id"],
            body["predicate"],
            body["source"]["revision"],
            answer["memory_id"],
            int(answer.get("revision") or 0),
            deleted,
        )
        with client.ledger.lock:
            client.ledger.writes.append(write)


def assert_fact(client: Client, subject: str, ref: str, expected: int | None, deleted: bool = False) -> int:
    seq = SEQ.next()
    body = fact_body(subject, f"{client.tenant}-{seq}", ref, str(seq), expected)
    status, answer = client.until_answered("POST", "/api/v1/records/", body)
    acknowledge(client, body, status, answer, deleted)
    return status


def current(client: Client, subject: str, purpose: str) -> tuple[int, Any]:
    query = urlencode({"project_id": PROJECT, "subject_id": subject, "predicate": PREDICATE, "purpose": purpose})
    status, answer, _ = client.call("GET", f"/api/v1/facts/current/?{query}")
    if status == 200 and isinstance(answer, dict) and answer.get("memory_id"):
        with client.ledger.lock:
            client.ledger.reads.append(Read(client.tenant, answer["memory_id"], "facts/current"))
    return status, answer


def writer(client: Client, keys: int, cap: Callable[[], bool]) -> None:
    """An agent: read a fact's revision, write a new value with expected_revision (409 on a lost race)."""
    rng = random.Random()
    while not client.stop.is_set() and not cap():
        subject = f"s-{rng.randrange(keys)}"
        status, answer = current(client, subject, "answer")
        if status >= 500 or status == 0:
            time.sleep(0.5)
            continue
        expected = answer.get("revision") if status == 200 and isinstance(answer, dict) else None
        assert_fact(client, subject, f"soak:{client.tenant}/{subject}", expected)


def reader(client: Client, keys: int, cap: Callable[[], bool]) -> None:
    """An agent reading for action and searching."""
    rng = random.Random()
    while not client.stop.is_set() and not cap():
        current(client, f"s-{rng.randrange(keys)}", "action")
        query = urlencode({"project_id": PROJECT, "q": f"{client.tenant} status", "k": 5})
        status, answer, _ = client.call("GET", f"/api/v1/search/?{query}")
        if status == 200 and isinstance(answer, dict):
            with client.ledger.lock:
                client.ledger.reads.extend(
                    Read(client.tenant, r["memory_id"], "search") for r in answer.get("results", []) if "memory_id" in r
                )
        time.sleep(0.05)


def disputer(agents: list[Client], owner: Client, cap: Callable[[], bool]) -> None:
    """Two agents assert different values for a new key at the same valid time from two sources (a dispute);
    the owner lists the open disputes and resolves each with the first candidate as the winner."""
    n = 0
    while not owner.stop.is_set() and not cap():
        n += 1
        subject = f"d-{n}"
        when = datetime.now(UTC).isoformat()
        for i, agent in enumerate(agents[:2]):
            seq = SEQ.next()
            body = fact_body(subject, f"{agent.tenant}-{seq}", f"source-{i}:{subject}", str(seq))
            body["valid_from"] = when
            status, answer = agent.until_answered("POST", "/api/v1/records/", body)
            acknowledge(agent, body, status, answer)
        status, listed = owner.until_answered("GET", f"/api/v1/disputes/?{urlencode({'status': 'open'})}")
        for dispute in (listed or {}).get("results", []) if status == 200 else []:
            winner = dispute["candidates"][0]["memory_id"]
            path = f"/api/v1/disputes/{dispute['id']}/resolve/"
            status, answer = owner.until_answered("POST", path, {"winner": winner, "reason": "Soak: first source."})
            if status == 200:
                with owner.ledger.lock:
                    owner.ledger.resolved.append((owner.tenant, dispute["id"], winner))
        owner.stop.wait(3.0)


def delete_subject(agent: Client, compliance: Client, subject: str) -> None:
    """A few facts of `subject`, then a subject deletion filed by compliance (dry run first, as a person would)."""
    assert_fact(agent, subject, f"soak:{agent.tenant}/{subject}", None, deleted=True)
    for _ in range(2):
        status, answer = current(agent, subject, "answer")
        if status == 200:
            assert_fact(agent, subject, f"soak:{agent.tenant}/{subject}", answer["revision"], deleted=True)
    request: dict[str, Any] = {"project_id": PROJECT, "scope": {"subject_id": subject}, "reason": "Soak deletion."}
    status, preview = compliance.until_answered("POST", "/api/v1/deletion-requests/", {**request, "dry_run": True})
    if status == 200 and isinstance(preview, dict) and preview.get("preview_id"):
        request["preview_id"] = preview["preview_id"]
    status, filed = compliance.until_answered("POST", "/api/v1/deletion-requests/", request)
    if status != 202:
        raise SoakError(f"filing the deletion of {subject} answered {status}: {filed}")
    with compliance.ledger.lock:
        compliance.ledger.deletions.append((compliance.tenant, filed["id"], subject, now()))
    say(f"deletion {filed['id']} of {compliance.tenant}/{subject} filed")


# --- The stack -------------------------------------------------------------------------------------------------


@dataclass
class Stack:
    processes: Processes
    cluster: PgCluster
    redis: Redis
    env: dict[str, str]
    owner_url: str
    webs: list[int]
    proxy: int
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)


def psql(cluster: PgCluster, sql: str) -> None:
    done = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", cluster.url("postgres"), "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode:
        raise SoakError(f"psql failed: {done.stderr.strip()}")


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode:
        raise SoakError(f"manage.py {args[0]} failed: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def build(work: Path, processes: Processes, workers: int) -> Stack:
    say("phase: PostgreSQL cluster (initdb)")
    cluster = PgCluster.create(prefix="soak-pg-", settings={"max_connections": "200", "log_lock_waits": "on"})
    stack_cluster.append(cluster)
    owner_pw, app_pw = secrets.token_hex(12), secrets.token_hex(12)
    psql(
        cluster,
        f"CREATE ROLE soak_owner LOGIN PASSWORD '{owner_pw}' NOSUPERUSER BYPASSRLS; "
        f"CREATE ROLE soak_app LOGIN PASSWORD '{app_pw}' NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS;",
    )
    psql(cluster, "CREATE DATABASE soak OWNER soak_owner")
    say("phase: Redis (AOF on)")
    redis = Redis(processes, work / "redis")
    redis.start()
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "LOGNAME", "SHELL", "TERM")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        PATH=f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO",
        DATABASE_URL=cluster.url("soak", "soak_app", app_pw),
        CELERY_BROKER_URL=redis.url(0),
        CACHE_URL=redis.url(1),
        VAR_DIR=str(work / "var"),
        EMBEDDER="hashing",  # no model to load in every process; search still runs end to end
        DB_CONN_MAX_AGE="60",
        WEB_CONCURRENCY="2",
        LOG_LEVEL="WARNING",
    )
    owner_url = cluster.url("soak", "soak_owner", owner_pw)
    say("phase: migrate as the owner, naming the app role")
    manage({**env, "DATABASE_URL": owner_url, "DATABASE_APP_ROLE": "soak_app"}, "migrate", "--noinput")
    say("phase: principals (manage.py create_principal, as the app role)")
    people = [("agent-1", "agent"), ("agent-2", "agent"), ("agent-3", "agent"), ("olga", "owner")]
    people.append(("carl", "compliance"))
    wanted = [(tenant, name, role) for tenant in TENANTS for name, role in people]
    # The documented command (docs/operations.md "API tokens"), once per principal, in one process (each
    # manage.py start costs seconds on a loaded machine): one token a line.
    script = (
        "import io, json, sys\n"
        "from django.core.management import call_command\n"
        "for tenant, name, role in json.loads(sys.argv[-1]):\n"
        "    out = io.StringIO()\n"
        "    call_command('create_principal', '--tenant', tenant, '--name', name, '--role', role, stdout=out)\n"
        "    print(out.getvalue().strip().splitlines()[-1])\n"
    )
    made = subprocess.run(
        [
            PYTHON,
            "-c",
            "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
            "'memory_admin.settings'); django.setup(); exec(sys.argv[1])",
            script,
            json.dumps(wanted),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = made.stdout.strip().splitlines()
    if made.returncode or len(lines) != len(wanted):
        raise SoakError(f"create_principal failed: {made.stderr[-2000:]}")
    tokens = {(t, n): token for (t, n, _), token in zip(wanted, lines, strict=True)}
    webs = [free_port(), free_port()]
    for i, port in enumerate(webs):
        command = [str(BIN / "gunicorn"), "-c", "python:memory_admin.gunicorn_conf", "--bind", f"127.0.0.1:{port}"]
        command += ["--control-socket", str(work / f"gunicorn-{i + 1}.ctl")]
        processes.start(f"web-{i + 1}", [*command, "memory_admin.wsgi"], env)
    proxy = free_port()
    backends = [arg for port in webs for arg in ("--backend", f"127.0.0.1:{port}")]
    processes.start(
        "proxy", [PYTHON, str(REPO_ROOT / "bench" / "soak_proxy.py"), "--listen", f"127.0.0.1:{proxy}", *backends], env
    )
    for i in range(workers):
        celery = [str(BIN / "celery"), "-A", "memory_admin", "worker", "--loglevel=WARNING", "--concurrency=1"]
        processes.start(
            f"worker-{i + 1}", [*celery, "-n", f"soak{i + 1}@%h", "--without-mingle", "--without-gossip"], env
        )
    beat = [str(BIN / "celery"), "-A", "memory_admin", "beat", "--loglevel=WARNING"]
    processes.start("beat", [*beat, "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"], env)
    probe = tokens[(TENANTS[0], "agent-3")]
    for port in webs:
        wait_for(f"gunicorn on port {port} to answer an API request", partial(answers, port, probe), 120, every=1)
    wait_for(f"the proxy on port {proxy}", lambda: port_open(proxy), 30)
    return Stack(processes, cluster, redis, env, owner_url, webs, proxy, tokens)


stack_cluster: list[PgCluster] = []


# --- Faults ------------------------------------------------------------------------------------------------------


def fault_worker(stack: Stack) -> float:
    stack.processes.kill9("worker-1")
    time.sleep(2)
    stack.processes.restart("worker-1")
    wait_for("worker-1 to be running", lambda: stack.processes.running["worker-1"].poll() is None, 10)
    return now()


def fault_redis(stack: Stack) -> float:
    stack.redis.stop()
    say("redis stopped")
    time.sleep(3)
    stack.redis.start()
    return now()


def fault_postgres(stack: Stack) -> float:
    say("pg_ctl stop -m fast (every session ended)")
    stack.cluster.stop("fast")
    time.sleep(3)
    say("pg_ctl start")
    stack.cluster.start()
    wait_for("PostgreSQL to accept connections", lambda: port_open(stack.cluster.port), 30)
    return now()


def fault_web(stack: Stack) -> float:
    stack.processes.kill9("web-1")
    time.sleep(3)
    stack.processes.restart("web-1")
    probe = stack.tokens[(TENANTS[0], "agent-3")]
    wait_for(f"web-1 on port {stack.webs[0]} to answer an API request", partial(answers, stack.webs[0], probe), 60)
    return now()


FAULTS: list[tuple[str, Callable[[Stack], float]]] = [
    ("kill -9 worker", fault_worker),
    ("restart redis", fault_redis),
    ("restart postgresql", fault_postgres),
    ("kill -9 web", fault_web),
]


# --- Verification ------------------------------------------------------------------------------------------


def owner_rows(stack: Stack) -> list[Row]:
    import psycopg

    with psycopg.connect(stack.owner_url, autocommit=True, connect_timeout=10) as sql:
        found = sql.execute(
            "SELECT t.slug, p.key, r.subject_id, r.predicate, r.source_revision, r.memory_id, r.revision"
            " FROM memory_memoryrecord r JOIN accounts_tenant t ON t.id = r.tenant_id"
            " JOIN memory_project p ON p.id = r.project_id"
        ).fetchall()
    return [Row(*row) for row in found]


def deletion_states(stack: Stack) -> dict[str, tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(stack.owner_url, autocommit=True, connect_timeout=10) as sql:
        found = sql.execute(
            "SELECT public_id, accepted_at, removed_from_reads_at, purge_confirmed_at FROM deletion_deletionrequest"
        ).fetchall()
    return {row[0]: row[1:] for row in found}


def resolved_disputes(stack: Stack) -> dict[str, tuple[str, str | None]]:
    import psycopg

    with psycopg.connect(stack.owner_url, autocommit=True, connect_timeout=10) as sql:
        found = sql.execute(
            "SELECT d.public_id, d.status, r.memory_id FROM memory_dispute d"
            " LEFT JOIN memory_memoryrecord r ON r.id = d.winner_id"
        ).fetchall()
    return {row[0]: (row[1], row[2]) for row in found}


def run(options: argparse.Namespace, work: Path, processes: Processes) -> tuple[int, str]:
    stack = build(work, processes, workers=2)
    ledger, stop = Ledger(), threading.Event()

    def cap() -> bool:
        return ledger.requests >= options.max_requests

    def client(tenant: str, name: str) -> Client:
        return Client(stack.proxy, stack.tokens[(tenant, name)], tenant, ledger, stop)

    threads: list[threading.Thread] = []
    for tenant in TENANTS:
        roles: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
            (writer, (client(tenant, "agent-1"), options.keys, cap)),
            (writer, (client(tenant, "agent-2"), options.keys, cap)),
            (reader, (client(tenant, "agent-3"), options.keys, cap)),
            (disputer, ([client(tenant, "agent-1"), client(tenant, "agent-2")], client(tenant, "olga"), cap)),
        ]
        for target, args in roles:
            threads.append(threading.Thread(target=target, args=args, daemon=True, name=f"{target.__name__}-{tenant}"))
    load_started[0] = now()
    say(f"phase: load ({len(threads)} client threads through the proxy on port {stack.proxy})")
    for thread in threads:
        thread.start()

    outages: list[Outage] = []
    deletions_at = 0

    def file_deletion() -> None:
        nonlocal deletions_at
        deletions_at += 1
        tenant = TENANTS[deletions_at % 2]
        delete_subject(client(tenant, "agent-3"), client(tenant, "carl"), f"del-{deletions_at}")

    stop.wait(options.warmup)
    file_deletion()
    for name, fault in FAULTS:
        dead = processes.dead()
        if dead:
            raise SoakError(f"{dead} exited on their own:\n" + "\n".join(processes.tail(n) for n in dead))
        file_deletion()
        time.sleep(1)
        say(f"phase: fault {name!r}")
        outage = Outage(name, now())
        outages.append(outage)
        outage.recovered = fault(stack)
        say(f"fault {name!r}: service back after {outage.recovered - outage.start:.1f} s; settling {options.settle} s")
        stop.wait(options.settle)
    remaining = options.seconds - now() + load_started[0]
    if remaining > 0 and not cap():
        say(f"phase: load without faults for {remaining:.0f} s more")
        stop.wait(remaining)
    stop.set()
    say("phase: stopping the load (waiting for the client threads, at most 60 s each)")
    for thread in threads:
        thread.join(timeout=60)
        if thread.is_alive():
            say(f"client thread {thread.name} still running after 60 s")

    say("phase: waiting for every deletion to reach purge_confirmed")
    wanted = [d[1] for d in ledger.deletions]

    def all_confirmed() -> bool:
        states = deletion_states(stack)
        return all(states.get(i, (None, None, None))[2] is not None for i in wanted)

    try:
        wait_for(f"purge_confirmed of {len(wanted)} deletions", all_confirmed, options.deletion_timeout, every=1)
    except SoakError as exc:
        say(str(exc))

    say("phase: verifying from the database as the owner")
    rows = owner_rows(stack)
    verdict = Verdict()
    check_writes(ledger.writes, rows, verdict)
    check_reads(ledger.reads, rows, verdict)
    check_failures(ledger.failures, outages, verdict)
    states = deletion_states(stack)
    disputes = resolved_disputes(stack)
    wrong_disputes = [(d, w, disputes.get(d)) for _, d, w in ledger.resolved if disputes.get(d) != ("resolved", w)]

    print()
    print(
        f"load: {ledger.requests} requests in {now() - load_started[0]:.0f} s; answers {dict(sorted(ledger.answered.items()))}"
    )
    print(
        f"load: {len(ledger.reads)} memory ids handed out by reads and searches; {len(ledger.resolved)} disputes resolved"
    )
    for outage in outages:
        failures = [f for f in ledger.failures if outage.covers(f.at)]
        last = max((f.at for f in failures), default=None)
        tail = f", last 5xx at +{last - outage.start:.1f} s" if last is not None else ""
        back = (outage.recovered or 0) - outage.start
        print(
            f"outage {outage.name!r}: window [{outage.start:.1f}, {outage.end:.1f}] s, service back after {back:.1f} s, "
            f"5xx {verdict.per_outage[outage.name]} ({statuses(failures)}){tail}"
        )
    if verdict.outside:
        print(f"5xx outside outages: {statuses(verdict.outside)}; first: {verdict.outside[:5]}")
    confirmed = 0
    gone = {w.subject: w for w in verdict.not_purged}
    for tenant, request_id, subject, filed_at in ledger.deletions:
        accepted, removed, purged = states.get(request_id, (None, None, None))
        if purged is None or accepted is None or removed is None:
            print(
                f"deletion {request_id} ({tenant}/{subject}, filed at {filed_at:.1f} s): NOT confirmed ({states.get(request_id)})"
            )
            continue
        ordered = accepted <= removed <= purged
        ok = ordered and subject not in gone
        confirmed += ok
        print(
            f"deletion {request_id} ({tenant}/{subject}, filed at {filed_at:.1f} s): removed from reads "
            f"+{(removed - accepted).total_seconds():.2f} s, purge confirmed +{(purged - accepted).total_seconds():.2f} s"
            + ("" if ordered else " STAGES OUT OF ORDER")
            + ("" if subject not in gone else " RECORDS STILL THERE")
        )
    verdict.deletions, verdict.confirmed = len(ledger.deletions), confirmed
    for write in verdict.lost[:10]:
        print(f"lost: {write}")
    for dup in verdict.duplicated[:10]:
        print(f"duplicated: {dup}")
    for what in verdict.cross_tenant[:10]:
        print(f"cross-tenant: {what}")
    for wrong in wrong_disputes[:10]:
        print(f"dispute not resolved as acknowledged: {wrong}")
    dead = processes.dead()
    if dead:
        print(f"processes that exited on their own: {dead}")
    return (0 if verdict.clean and not wrong_disputes else 1), verdict.last_line()


load_started = [0.0]


def main() -> int:
    parser = argparse.ArgumentParser(description="The scale-out soak under faults (issue 36, item 2).")
    parser.add_argument("--seconds", type=float, default=150, help="load duration from its start (faults inside)")
    parser.add_argument("--warmup", type=float, default=15, help="load before the first fault")
    parser.add_argument("--settle", type=float, default=20, help="seconds between two faults")
    parser.add_argument("--keys", type=int, default=20, help="fact keys per tenant the agents write")
    parser.add_argument("--max-requests", type=int, default=40000, help="the request cap")
    parser.add_argument("--deletion-timeout", type=float, default=120)
    parser.add_argument("--max-minutes", type=float, default=10, help="the watchdog: everything ends then")
    options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    (work / "logs").mkdir()
    processes = Processes(work / "logs")
    finished = threading.Event()

    def cleanup() -> None:
        processes.stop_all()
        for cluster in stack_cluster:
            if cluster.log.exists():
                shutil.copy(cluster.log, work / "logs" / "postgresql.log")
            cluster.destroy()
        stack_cluster.clear()

    atexit.register(cleanup)

    def on_signal(signum: int, _frame: Any) -> None:
        say(f"signal {signum}: stopping everything")
        cleanup()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    limit = options.max_minutes * 60
    # Stacks of every thread a minute before the watchdog, so a hang says where it is.
    faulthandler.dump_traceback_later(max(30.0, limit - 60), exit=False)

    def watchdog() -> None:
        if not finished.wait(limit):
            say(f"watchdog: {options.max_minutes} minutes are up; stopping everything")
            faulthandler.dump_traceback(all_threads=True)
            cleanup()
            os._exit(2)

    threading.Thread(target=watchdog, daemon=True, name="watchdog").start()
    say(f"soak: logs in {work / 'logs'}")
    try:
        code, last_line = run(options, work, processes)
    except SoakError as exc:
        say(f"soak FAILED: {exc}")
        for name in processes.dead():
            print(f"--- {name}.log (tail) ---\n{processes.tail(name)}")
        code, last_line = 2, "soak: did not run to the end (see above)"
    finally:
        finished.set()
        faulthandler.cancel_dump_traceback_later()
        say("phase: stopping every service")
        cleanup()
    say(f"soak done in {now():.0f} s (logs in {work / 'logs'})")
    print(last_line, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
