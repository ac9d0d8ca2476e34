"""Helpers for tests that need real processes: a running `serve`, free ports."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from agents.serving import free_port, stop_server, wait_until_healthy

ROOT = Path(__file__).resolve().parent.parent


PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTSITE_TEST_DB", "DJANGO_SETTINGS_MODULE")}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


class Server:
    def __init__(self, base_url: str, process: subprocess.Popen, state_root: Path, log: Path):
        self.base_url = base_url
        self.process = process
        self.state_root = state_root
        self.log = log

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kwargs.pop("timeout", 10), **kwargs)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


def _run_root() -> Path:
    """The folder of this run shared by its pytest-xdist workers (each worker's state root is a folder in it)."""
    root = Path(os.environ["AGENTSITE_STATE_ROOT"])
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def _migrations_digest(*also: Path) -> str:
    """Names what the migrations make: the project's, and the installed Django's and django-q2's."""
    digest = hashlib.sha256(f"django {metadata.version('django')} django-q2 {metadata.version('django-q2')}".encode())
    for migration in [*sorted(ROOT.glob("*/migrations/*.py")), *also]:
        digest.update(str(migration.relative_to(ROOT)).encode() + b"\0" + migration.read_bytes())
    return digest.hexdigest()[:12]


MIGRATE = ("import django; django.setup(); from django.core.management import call_command; "
           "call_command('migrate', interactive=False, verbosity=0); call_command('createcachetable', verbosity=0)")


def migrated_database() -> Path:
    """A SQLite database `manage.py migrate` and `createcachetable` made once for the whole run.

    The first worker to ask makes it under a lock; the others wait for it and take the same file.
    Its folder is named after the migrations' contents, so a state root kept across runs never hands out
    a database made by older migrations.
    """
    folder = _run_root() / f"migrated-template-{_migrations_digest()}"
    folder.mkdir(exist_ok=True)
    database = folder / "db.sqlite3"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            database.unlink(missing_ok=True)
            made = subprocess.run([sys.executable, "-c", MIGRATE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                                  env=child_env(AGENTSITE_STATE_ROOT=str(folder),
                                                DJANGO_SETTINGS_MODULE="agentsite.settings"))
            assert made.returncode == 0, made.stderr
            with contextlib.closing(sqlite3.connect(database)) as db:  # everything in the file, none in a -wal
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (folder / "done").touch()
    return database


def premigrate(state_root: Path, env: dict[str, str] | None = None) -> None:
    """Give a new SQLite state root a copy of the run's migrated database: its server's `migrate` has nothing to do.

    A state root that has a database, or a server on another database (DATABASE_URL), is left as it is.
    """
    if (env or {}).get("DATABASE_URL") or os.environ.get("DATABASE_URL"):
        return
    target = state_root / "db.sqlite3"
    if not target.exists():
        shutil.copyfile(migrated_database(), target)


@contextlib.contextmanager
def run_server(state_root: Path, *args: str, env: dict[str, str] | None = None, ready_timeout: float = 90,
               port: int | None = None, cwd: Path = ROOT,
               ready_headers: dict[str, str] | None = None, migrated: bool = True) -> Iterator[Server]:
    """Start `manage.py serve` on `port` (default: a free one) in `cwd` and wait until /healthz answers
    (asked with `ready_headers`: a production server behind a proxy answers only what the proxy sends).

    A new state root starts from the run's migrated database (`premigrate`) unless `migrated` is False:
    then serve migrates the empty state root itself.
    """
    port = port or free_port()
    state_root.mkdir(parents=True, exist_ok=True)
    if migrated:
        premigrate(state_root, env)
    log = state_root / f"serve-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--state-root", str(state_root), *args],
            cwd=cwd, env=child_env(**(env or {})), stdout=out, stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", process, state_root, log)
    try:
        wait_until_healthy(server.base_url, process, timeout=ready_timeout, output=server.output,
                           headers=ready_headers, name="serve")
        yield server
    finally:
        stop_server(process, grace=20)


def read_stream_until(client: httpx.Client, url: str, until_type: str, *, count: int = 1, timeout: float = 15) -> list[dict]:
    """Read an NDJSON stream until `until_type` has been seen `count` times, then leave."""
    events: list[dict] = []
    seen = 0
    with client.stream("GET", url, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            events.append(event)
            if event["type"] == until_type:
                seen += 1
                if seen >= count:
                    break
    return events


def migrated_postgres_template() -> str:
    """The name of a PostgreSQL database `migrate` and `createcachetable` made, for copies to start from.

    Named after the migrations' and the settings' contents (the cache tables), as it outlives the run, and
    made once on this server (under an advisory lock, so concurrent runs make it once too): built under
    another name and renamed when complete. It takes no connections, so a copy can always be made of it.
    """
    import psycopg

    name = f"agentsite_template_{_migrations_digest(ROOT / 'agentsite' / 'settings.py')}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext('agentsite-tests-template'))")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            # Templates of earlier migrations go, but for the two newest (another checkout's run may be
            # copying one): a developer's server would otherwise gather one per change of migrations.
            older = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'agentsite\\_template\\_%%' "
                                 "ORDER BY oid DESC OFFSET 2").fetchall()
            for (old,) in older:
                conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
            building = f"{name}_building"
            conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{building}"')
            with tempfile.TemporaryDirectory() as state_root:
                made = subprocess.run([sys.executable, "-c", MIGRATE], cwd=ROOT, capture_output=True, text=True,
                                      timeout=300, env=child_env(
                                          AGENTSITE_STATE_ROOT=state_root, DJANGO_SETTINGS_MODULE="agentsite.settings",
                                          DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{building}", REDIS_URL=""))
            assert made.returncode == 0, made.stderr
            conn.execute(f'ALTER DATABASE "{building}" WITH ALLOW_CONNECTIONS false')
            conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        conn.execute("SELECT pg_advisory_unlock(hashtext('agentsite-tests-template'))")
    return name


@contextlib.contextmanager
def postgres_database(migrated: bool = False) -> Iterator[str]:
    """A throwaway PostgreSQL database, dropped afterwards; `migrated`: a copy of the migrated template,
    so its servers' `migrate` has nothing to do."""
    import psycopg

    name = f"agentsite_live_{secrets.token_hex(4)}"
    template = f' TEMPLATE "{migrated_postgres_template()}"' if migrated else ""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')
    try:
        yield f"postgres://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def redis_database() -> Iterator[str]:
    """An empty Redis database of our own, so no other cluster takes our turns from its queue.

    Scanned upwards from 1: bench/turns.py takes empty ones downwards from 15.
    """
    import redis

    for number in range(1, 16):
        client = redis.Redis(host="127.0.0.1", port=6379, db=number)
        # Claim it with a key, so a concurrent run skips it as non-empty.
        if client.dbsize() == 0 and client.set("agentsite-tests:claimed", "1", nx=True, ex=3600):
            break
    else:
        pytest.fail("no empty Redis database among 1..15")
    try:
        yield f"redis://127.0.0.1:6379/{number}"
    finally:
        client.flushdb()


def backend_env(stack: contextlib.ExitStack, backend: str, migrated: bool = False) -> dict[str, str]:
    """The environment of a server on `backend` ("sqlite" or "postgres+redis"); throwaway databases on `stack`
    (`migrated`: PostgreSQL's a copy of the migrated template)."""
    if backend != "postgres+redis":
        return {}
    return {"DATABASE_URL": stack.enter_context(postgres_database(migrated)),
            "REDIS_URL": stack.enter_context(redis_database())}


def unmount_under(folder: Path) -> None:
    """Unmount whatever is mounted below `folder` (workspaces on filesystems of their own), deepest first."""
    real = os.path.realpath(folder).rstrip("/") + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        points = [line.split()[4].replace("\\040", " ") for line in info]
    for point in sorted((p for p in points if p.startswith(real)), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
