"""`manage.py check` names a database migrated by a newer agentsite, and `serve` refuses to start on it.

"Newer" is faked the way a newer version leaves a database: a row in django_migrations for a
migration this code does not have. Each case runs the real command in a child process, on a scratch
SQLite file and on a scratch PostgreSQL database.
"""
from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.support import ROOT, child_env, postgres_database, premigrate

FUTURE = ("agent_sessions", "0999_from_a_newer_version")


@contextlib.contextmanager
def scratch_database(kind: str, state_root: Path) -> Iterator[tuple[dict[str, str], Callable[..., None]]]:
    """A migrated scratch database: the environment of a command on it, and a runner of SQL on it."""
    state_root.mkdir(parents=True, exist_ok=True)
    env = child_env(AGENTSITE_STATE_ROOT=str(state_root))
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if kind == "sqlite":
        premigrate(state_root, env)

        def execute(sql: str, params: tuple = ()) -> None:
            with contextlib.closing(sqlite3.connect(state_root / "db.sqlite3")) as db, db:
                db.execute(sql.replace("%s", "?"), params)

        yield env, execute
    else:
        import psycopg

        with postgres_database(migrated=True) as url:
            def execute(sql: str, params: tuple = ()) -> None:
                with psycopg.connect(url.replace("postgres://", "postgresql://")) as db:
                    db.execute(sql, params)

            yield {**env, "DATABASE_URL": url}, execute


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_check_names_a_database_ahead_of_the_code(tmp_path, kind):
    with scratch_database(kind, tmp_path / "state") as (env, execute):
        clean = manage(env, "check")
        assert clean.returncode == 0, clean.stderr
        assert "agentsite.E002" not in clean.stdout + clean.stderr

        execute("INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, CURRENT_TIMESTAMP)", FUTURE)
        ahead = manage(env, "check")
        assert ahead.returncode == 1
        assert "agentsite.E002" in ahead.stderr
        assert "agent_sessions.0999_from_a_newer_version" in ahead.stderr
        assert "migrated by a newer agentsite" in ahead.stderr

        # `migrate` on it would change nothing and leave the older code running on newer tables: it refuses too.
        migrate = manage(env, "migrate")
        assert migrate.returncode == 1
        assert "agent_sessions.0999_from_a_newer_version" in migrate.stderr


def test_serve_refuses_to_start_on_a_database_ahead_of_the_code(tmp_path):
    with scratch_database("sqlite", tmp_path / "state") as (env, execute):
        execute("INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, CURRENT_TIMESTAMP)", FUTURE)
        served = manage(env, "serve", "--port", "1", "--no-examples")
        assert served.returncode == 1
        assert "agentsite.E002" in served.stderr and "0999_from_a_newer_version" in served.stderr


def test_check_says_nothing_of_a_database_not_made_yet(tmp_path):
    state_root = tmp_path / "new"
    state_root.mkdir()
    env = child_env(AGENTSITE_STATE_ROOT=str(state_root))
    env.pop("DATABASE_URL", None)
    done = manage(env, "check")
    assert done.returncode == 0, done.stderr
    assert not (state_root / "db.sqlite3").exists()  # the check made no database


def test_check_says_nothing_of_a_database_without_tables(tmp_path):
    state_root = tmp_path / "empty"
    state_root.mkdir()
    sqlite3.connect(state_root / "db.sqlite3").close()
    env = child_env(AGENTSITE_STATE_ROOT=str(state_root))
    env.pop("DATABASE_URL", None)
    done = manage(env, "check")
    assert done.returncode == 0, done.stderr
