"""A PostgreSQL database copied out with Debian's `pg_dump` and put back with `pg_restore`.

pg_dump reads one repeatable-read snapshot and takes no lock a writer waits for. The manifest's facts
are read in that same snapshot: this module opens it, exports it (`pg_export_snapshot`) and hands it to
pg_dump with `--snapshot`, so the counts are those of the dumped rows. The password, if any, goes to the
tools in PGPASSWORD, never on a command line.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import psycopg
from django.conf import settings

from agentsite.backups import facts
from agentsite.backups.archive import BackupError


def libpq_target(config: dict[str, Any] | None = None) -> tuple[str, dict[str, str]]:
    """A libpq URL of the configured database (no password in it) and the environment the tools need."""
    db = config or settings.DATABASES["default"]
    host = db.get("HOST") or "localhost"
    netloc = quote(db.get("USER") or "", safe="") + "@" if db.get("USER") else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    env = dict(os.environ)
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])
    return f"postgresql://{netloc}{host}{port}/{quote(db['NAME'], safe='')}", env


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BackupError(f"{name} is not installed: install PostgreSQL's client tools of the server's version "
                          "(Debian: apt-get install postgresql-client-15)")
    return path


def _run(args: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackupError(f"{what} failed: {detail}")


def dump(target: Path) -> dict[str, Any]:
    """pg_dump of the configured database in custom format to `target`; the manifest's facts of the same snapshot."""
    url, env = libpq_target()
    started = time.monotonic()
    with psycopg.connect(url, password=env.get("PGPASSWORD")) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        try:
            described = facts.describe(conn.cursor())
        except psycopg.errors.UndefinedTable as e:
            raise BackupError(f"the database has no agentsite tables ({str(e).splitlines()[0]}); nothing to back "
                              "up: run the server (or `manage.py migrate`) first") from None
        # The exporting transaction must stay open until pg_dump has taken the snapshot: it runs inside it.
        # --no-sync: the dump is a scratch part; the archive is synced once whole. pg_dump's own fsync of it
        # made the server's commits wait behind the flush (writes of 130-200 ms against 20 ms without).
        _run([_tool("pg_dump"), "--format=custom", "--no-sync", "--no-owner", "--no-privileges",
              f"--snapshot={snapshot}", f"--file={target}", url], env, "pg_dump")
        conn.rollback()
    return {**described, "copySeconds": round(time.monotonic() - started, 3)}


def check_dump(path: Path) -> None:
    """Read the whole dump as pg_restore would (every table's data decompressed), writing nothing."""
    _run([_tool("pg_restore"), "--file=/dev/null", str(path)], dict(os.environ), "pg_restore of the database part")


def is_empty() -> bool:
    """No table in the configured database's public schema."""
    url, env = libpq_target()
    with psycopg.connect(url, password=env.get("PGPASSWORD")) as conn:
        return conn.execute("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


def clear() -> None:
    """Drop everything in the public schema (`restore --force`)."""
    url, env = libpq_target()
    with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def put_back(part: Path, config: dict[str, Any] | None = None) -> None:
    """pg_restore the dump into the configured (empty) database, or `config`'s, in one transaction: all of
    it or nothing."""
    url, env = libpq_target(config)
    _run([_tool("pg_restore"), "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
          f"--dbname={url}", str(part)], env, "pg_restore")


@contextlib.contextmanager
def scratch_database(prefix: str, why: str, config: dict[str, Any] | None = None) -> Iterator[str]:
    """A new empty database named `prefix` and a random suffix on the server of `config` (default: this
    server's), dropped on leaving; its name. `why`: what it is for, in the error when it cannot be made."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    url, env = libpq_target(config)
    try:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as e:
        raise BackupError(f"cannot make a scratch database {why} ({str(e).splitlines()[0]}): grant the database "
                          "user CREATEDB") from None
    try:
        yield name
    finally:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
