"""What a run measures against: the paths, the counts, the limits, and each configuration's backends."""
from __future__ import annotations

import contextlib
import secrets
import sqlite3
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parent.parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
AGENT = "support"
PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
REDIS_HOST = "127.0.0.1:6379"

TOOL_MESSAGE = '/call lookup_order {"order_id": "A100"}'

FULL = {"warmup": 10, "w1": 300, "w2": 300, "w2_window": 50, "w3_clients": 16, "w3_seconds": 20.0, "w4": 100,
        "w5": 20, "w5_tokens": 200, "w5_gap_ms": 10.0, "idle_seconds": 2.0, "rss_every": 50}
QUICK = {"warmup": 3, "w1": 30, "w2": 40, "w2_window": 10, "w3_clients": 16, "w3_seconds": 4.0, "w4": 10,
         "w5": 5, "w5_tokens": 200, "w5_gap_ms": 10.0, "idle_seconds": 1.0, "rss_every": 10}

TURN_TIMEOUT = 30.0          # one turn (create → session.waiting), seconds
WORKLOAD_DEADLINE = 600.0    # any one sequential workload, seconds
HTTP_TIMEOUT = httpx.Timeout(connect=5.0, read=TURN_TIMEOUT, write=5.0, pool=TURN_TIMEOUT)


class BenchError(RuntimeError):
    pass


# ------------------------------------------------------------ configurations
@dataclass
class Config:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    pg_db: str | None = None
    redis_db: int | None = None
    db_path: Path | None = None

    def describe(self) -> str:
        if self.pg_db:
            return f"PostgreSQL db {self.pg_db} + Redis db {self.redis_db}"
        return "embedded: SQLite WAL + in-memory layer + ORM broker"


def pg_create() -> str:
    import psycopg

    name = f"agentsite_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def pg_drop(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_pick_db(wanted: int | None) -> int:
    import redis

    candidates = [wanted] if wanted is not None else list(range(15, 0, -1))
    for n in candidates:
        client = redis.Redis(host="127.0.0.1", port=6379, db=n, socket_timeout=5)
        try:
            if client.dbsize() == 0 or wanted is not None:
                return n
        finally:
            client.close()
    raise BenchError("no empty Redis db number (1..15) to use; pass --redis-db")


def redis_cleanup(n: int) -> int:
    """Delete the keys agentsite puts in Redis (channels_redis `asgi*`, django-q `django_q:*`)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=n, socket_timeout=5)
    removed = 0
    try:
        for pattern in ("asgi*", "django_q:*"):
            keys = list(client.scan_iter(match=pattern, count=1000))[:100_000]
            for i in range(0, len(keys), 500):
                removed += client.delete(*keys[i:i + 500])
    finally:
        client.close()
    return removed


@contextlib.contextmanager
def backend(name: str, env: dict[str, str]) -> Iterator[None]:
    """For `pg`: a throwaway PostgreSQL database and a free Redis db, named in `env`
    (DATABASE_URL, REDIS_URL), dropped and cleaned afterwards. `embedded` needs neither."""
    if name != "pg":
        yield
        return
    pg_db, redis_db = pg_create(), redis_pick_db(None)
    env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{pg_db}"
    env["REDIS_URL"] = f"redis://{REDIS_HOST}/{redis_db}"
    try:
        yield
    finally:
        pg_drop(pg_db)
        redis_cleanup(redis_db)


def turn_times(cfg: Config, turn_ids: list[str]) -> dict[str, tuple[float | None, float | None]]:
    """(created_at, started_at) of turns, epoch seconds, read straight from the database."""
    if not turn_ids:
        return {}
    out: dict[str, tuple[float | None, float | None]] = {}
    if cfg.pg_db:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={cfg.pg_db}", connect_timeout=5) as conn:
            rows = conn.execute("SELECT id, created_at, started_at FROM agent_sessions_turn WHERE id = ANY(%s)",
                                [turn_ids]).fetchall()
        for tid, created, started in rows:
            out[tid] = (created.timestamp() if created else None, started.timestamp() if started else None)
    elif cfg.db_path:
        conn = sqlite3.connect(f"file:{cfg.db_path}?mode=ro", uri=True, timeout=20)
        try:
            rows = []
            for i in range(0, len(turn_ids), 500):
                chunk = turn_ids[i:i + 500]
                rows += conn.execute(
                    f"SELECT id, created_at, started_at FROM agent_sessions_turn WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall()
        finally:
            conn.close()

        def ts(v: str | None) -> float | None:
            return datetime.fromisoformat(v).replace(tzinfo=timezone.utc).timestamp() if v else None

        for tid, created, started in rows:
            out[tid] = (ts(created), ts(started))
    return out

