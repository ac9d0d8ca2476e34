"""Helpers for tests that need real processes: a running `serve`, free ports."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@contextlib.contextmanager
def run_server(state_root: Path, *args: str, env: dict[str, str] | None = None, ready_timeout: float = 90,
               port: int | None = None, cwd: Path = ROOT,
               ready_headers: dict[str, str] | None = None) -> Iterator[Server]:
    """Start `manage.py serve` on `port` (default: a free one) in `cwd` and wait until /healthz answers
    (asked with `ready_headers`: a production server behind a proxy answers only what the proxy sends)."""
    port = port or free_port()
    state_root.mkdir(parents=True, exist_ok=True)
    log = state_root / f"serve-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--state-root", str(state_root), *args],
            cwd=cwd, env=child_env(**(env or {})), stdout=out, stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", process, state_root, log)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"serve exited with {process.returncode}:\n{server.output()}")
            try:
                if httpx.get(f"{server.base_url}/healthz", headers=ready_headers, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve did not become ready:\n{server.output()}")
            time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A throwaway PostgreSQL database, dropped afterwards."""
    import psycopg

    name = f"agentsite_live_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
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


def backend_env(stack: contextlib.ExitStack, backend: str) -> dict[str, str]:
    """The environment of a server on `backend` ("sqlite" or "postgres+redis"); throwaway databases on `stack`."""
    if backend != "postgres+redis":
        return {}
    return {"DATABASE_URL": stack.enter_context(postgres_database()), "REDIS_URL": stack.enter_context(redis_database())}
