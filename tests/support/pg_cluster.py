"""A throwaway PostgreSQL cluster of its own: initdb in a temporary directory, a free loopback port, trust
authentication for the `postgres` superuser; started, stopped (`-m immediate` is a crash) and started again
without touching the machine's own server. Used by tests/deletion/test_crypto_shredding.py (it reads the
cluster's files) and bench/soak.py (it restarts the cluster under load).

    cluster = PgCluster.create()      # initdb + start
    cluster.url("postgres")           # postgres://postgres@127.0.0.1:PORT/postgres
    cluster.restart()                 # stop (fast) + start, same port and data
    cluster.destroy()                 # stop (immediate) + remove the directory

Needs initdb and pg_ctl (POSTGRES_BIN, /usr/local/bin unless set, else found on PATH or under
/usr/lib/postgresql/*/bin). Run as root, the server runs as the `postgres` user (runuser). Every wait has a
timeout (pg_ctl's `-t`, the subprocess's own)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Seconds pg_ctl waits for the server to start or stop (its -t), and the subprocess's own bound above it.
PG_CTL_TIMEOUT = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_bin() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when there is none on this machine."""
    candidates = [Path(os.environ["POSTGRES_BIN"])] if os.environ.get("POSTGRES_BIN") else []
    candidates.append(Path("/usr/local/bin"))
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class PgCluster:
    top: Path
    port: int
    bin: Path
    options: str = ""

    @property
    def data(self) -> Path:
        return self.top / "data"

    @property
    def log(self) -> Path:
        return self.top / "server.log"

    def url(self, database: str, user: str = "postgres", password: str = "") -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgres://{auth}@127.0.0.1:{self.port}/{database}"

    @classmethod
    def create(cls, prefix: str = "pg-cluster-", settings: dict[str, str] | None = None) -> PgCluster:
        """initdb a new cluster in a temporary directory and start it; `settings` are extra `-c` options."""
        folder = postgres_bin()
        if folder is None:
            raise RuntimeError("initdb and pg_ctl are needed for a throwaway cluster (POSTGRES_BIN names their folder)")
        top = Path(tempfile.mkdtemp(prefix=prefix))
        if os.geteuid() == 0:
            shutil.chown(top, "postgres")
        cluster = cls(top, _free_port(), folder)
        cluster._run(
            [str(folder / "initdb"), "-D", str(cluster.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        )
        options = "".join(f" -c {k}={v}" for k, v in (settings or {}).items())
        cluster.options = f"-p {cluster.port} -k {top} -c listen_addresses=127.0.0.1{options}"
        cluster.start()
        return cluster

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            _as_postgres(command), capture_output=True, text=True, timeout=PG_CTL_TIMEOUT + 30, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def _pg_ctl(self, *args: str) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-t", str(PG_CTL_TIMEOUT), *args])

    def start(self) -> None:
        self._pg_ctl("-l", str(self.log), "-o", self.options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """`fast` ends every session and checkpoints; `immediate` is a crash (recovery on the next start)."""
        self._pg_ctl("-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def destroy(self) -> None:
        """Stop the server (immediate; whatever state it is in) and remove its directory."""
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            pid = self.pid()
            if pid:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
        shutil.rmtree(self.top, ignore_errors=True)
