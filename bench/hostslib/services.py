"""The database, Redis and the small helpers of the topology: throwaway or private, restartable ones."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import psycopg
import redis

from agents.serving import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
PYTHON = sys.executable
SITE = ROOT / "deploy" / "nginx-hosts.conf"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
WEBS = ("web-a", "web-b")
WORKERS = ("worker-a", "worker-b")


class TopologyError(RuntimeError):
    pass


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if value := condition():
                return value
        if time.monotonic() > deadline:
            raise TopologyError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# --- the database and Redis -------------------------------------------------------------


@contextlib.contextmanager
def throwaway_database(admin_url: str = PG_ADMIN) -> Iterator[str]:
    """A fresh database on the server `admin_url` names, dropped afterwards; yields its URL."""
    name = f"agentsite_hosts_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with contextlib.suppress(Exception), psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def redis_database(host: str = "127.0.0.1", port: int = 6379) -> Iterator[str]:
    """An empty Redis db number, claimed with a key (as tests/support.py claims them, upwards from 1)."""
    for number in range(1, 16):
        client = redis.Redis(host=host, port=port, db=number)
        if client.dbsize() == 0 and client.set("agentsite-tests:claimed", "1", nx=True, ex=3600):
            break
    else:
        raise TopologyError("no empty Redis database among 1..15")
    try:
        yield f"redis://{host}:{port}/{number}"
    finally:
        client.flushdb()


class PrivateRedis:
    """redis-server on a port of its own, a child process this harness may kill and start again.

    Append-only with fsync on every write, as a Redis that holds a task queue should run:
    a restart keeps what was queued."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        with open(self.folder / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder), "--save", "",
                 "--appendonly", "yes", "--appendfsync", "always"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: port_open(self.port), "redis-server to listen", timeout=20)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


class PrivatePostgres:
    """A PostgreSQL cluster of its own (Debian's initdb and pg_ctl) in `folder`, on its own port.

    PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` user."""

    def __init__(self):
        # Its own folder straight under /tmp: the postgres user must reach it (a test's tmp_path is root's, 0700).
        self.folder = Path(tempfile.mkdtemp(prefix="agentsite-hosts-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            raise TopologyError("PostgreSQL's server binaries are not installed (/usr/lib/postgresql/*/bin)")
        self.bin = bins[-1].parent

    def _run(self, *args: str, timeout: float = 120) -> None:
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise TopologyError(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-sync")

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off "
                   "-c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "postgres.log"),
                  "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(TopologyError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)
