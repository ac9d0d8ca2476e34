"""Event indexes stay contiguous with several writer processes on one session.

Four OS processes call `sessions.eventlog.events.append_events` on the same session at
once (singles and batches), released together by a start gate, on a SQLite
file database in WAL mode and on PostgreSQL. The log must come out as exactly
0..N-1 with each writer's events in its own order and its batches unbroken;
it is read straight from the tables, not through the code under test.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from sessions.models import Event, Session

from tests.sessions.test_live_stream import postgres_database
from tests.support import ROOT, child_env, premigrate

WRITERS = 4
CALLS = 100  # per writer; every 10th call appends a batch of BATCH events
BATCH = 5
PER_WRITER = CALLS - CALLS // 10 + (CALLS // 10) * BATCH

SETUP = """
import django
django.setup()
from django.core.management import call_command
from agents.discovery import deploy_agent_folder
from sessions.models import Session

call_command("migrate", verbosity=0)
deployment = deploy_agent_folder(sys.argv[1])
session = Session.objects.create(
    agent=deployment.agent, deployment=deployment, principal_id="tester", authenticator="test",
)
print(session.id)
"""

WRITER = """
import os, time
import django
django.setup()
from django.db import connection
from sessions.eventlog.events import append_event, append_events

session_id, writer, calls, batch, gate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
connection.ensure_connection()
print("ready", flush=True)
while not os.path.exists(gate):
    time.sleep(0.002)
seq = 0
for call in range(calls):
    if call % 10 == 9:
        append_events(session_id, [("test.appended", {"writer": writer, "seq": seq + i, "batch": call}) for i in range(batch)])
        seq += batch
    else:
        append_event(session_id, "test.appended", {"writer": writer, "seq": seq})
        seq += 1
print("done", seq, flush=True)
"""


def python(code: str) -> list[str]:
    return [sys.executable, "-c", "import sys\n" + code]


def run(code: str, env: dict[str, str], *args: str, timeout: float = 60) -> str:
    done = subprocess.run(python(code) + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def writer_env(state_root: Path, database_url: str | None) -> dict[str, str]:
    env = child_env(DJANGO_SETTINGS_MODULE="agentsite.settings", AGENTSITE_STATE_ROOT=str(state_root))
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


@contextlib.contextmanager
def database(kind: str, state_root: Path,
             migrated: bool = False) -> Iterator[tuple[dict[str, str], Callable[[str], tuple[int, list]]]]:
    """The writers' environment, and a reader of (next index, [(index, data), ...]) straight from the tables.

    With `migrated` the database starts as a copy of a migrated one, so a child's `migrate` has nothing to do.
    """
    session_table, event_table = Session._meta.db_table, Event._meta.db_table
    next_sql = f"SELECT next_event_index FROM {session_table} WHERE id = ?"
    rows_sql = f'SELECT "index", data FROM {event_table} WHERE session_id = ? ORDER BY 1'
    if kind == "sqlite":
        state_root.mkdir(parents=True, exist_ok=True)
        if migrated:
            premigrate(state_root)

        def read(session_id: str) -> tuple[int, list]:
            with contextlib.closing(sqlite3.connect(state_root / "db.sqlite3")) as db:
                rows = db.execute(rows_sql, [session_id]).fetchall()
                return db.execute(next_sql, [session_id]).fetchone()[0], [(i, json.loads(d)) for i, d in rows]

        yield writer_env(state_root, None), read
    else:
        import psycopg

        with postgres_database(migrated) as url:
            def read(session_id: str) -> tuple[int, list]:
                with psycopg.connect(url.replace("postgres://", "postgresql://")) as db:
                    rows = db.execute(rows_sql.replace("?", "%s"), [session_id]).fetchall()
                    return db.execute(next_sql.replace("?", "%s"), [session_id]).fetchone()[0], rows

            yield writer_env(state_root, url), read


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_four_writer_processes_keep_indexes_contiguous(kind, tmp_path):
    with database(kind, tmp_path / "state", migrated=True) as (env, read):
        session_id = run(SETUP, env, str(ROOT / "examples" / "support")).strip()
        gate = tmp_path / "go"
        writers = [
            subprocess.Popen(python(WRITER) + [session_id, str(w), str(CALLS), str(BATCH), str(gate)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for w in range(WRITERS)
        ]
        try:
            # Release them together once every writer has connected.
            for w in writers:
                line = w.stdout.readline()
                assert line.strip() == "ready", w.stderr.read()
            gate.touch()
            for w in writers:
                out, err = w.communicate(timeout=90)
                assert w.returncode == 0, err
                assert out.strip() == f"done {PER_WRITER}"
        finally:
            for w in writers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        next_index, rows = read(session_id)

    total = WRITERS * PER_WRITER
    indexes = [index for index, _ in rows]
    assert indexes == list(range(total)), "indexes must be exactly 0..N-1: no gap, no duplicate"
    assert next_index == total

    for writer in range(WRITERS):
        mine = [(index, data) for index, data in rows if data["writer"] == writer]
        assert [data["seq"] for _, data in mine] == list(range(PER_WRITER)), "a writer's events keep its order"
        batches: dict[int, list[int]] = {}
        for index, data in mine:
            if "batch" in data:
                batches.setdefault(data["batch"], []).append(index)
        assert len(batches) == CALLS // 10
        for found in batches.values():
            assert found == list(range(found[0], found[0] + BATCH)), "a batch is one contiguous run"
