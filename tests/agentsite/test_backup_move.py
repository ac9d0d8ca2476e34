"""`manage.py restore FILE --to DATABASE_URL`: a SQLite server moved to PostgreSQL and back, as an operator runs it.

A SQLite state root (finished sessions, a turn held when the backup was taken, a parked approval, a release
with its bundle, a secret, a user with a personal token) is backed up and restored `--to` a scratch
PostgreSQL database; that one is backed up and restored `--to` a fresh SQLite file. Every table is read
back through the ORM at each step and compared.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet

from tests.agentsite.backup_support import fill, manage, manage_json, manage_ok, state_env
from tests.support import ROOT, postgres_database

KEY = Fernet.generate_key().decode()

# A user with a personal token and a parked approval, beside what `fill` makes.
MORE = """
import django
django.setup()
from django.contrib.auth.models import Group, User
from django.db.models import JSONField, Value
from django.utils import timezone
from agents.models import Deployment
from sessions.models import KVEntry, Session, Turn
from sessions.models.token import PersonalToken
from sessions.models.toolcall import ToolCall
from sessions.eventlog.events import append_event

user = User.objects.create_user("ada", "ada@example.com", "correct horse")
user.groups.add(Group.objects.get(name="operators"))
PersonalToken.issue(user, "laptop", expires_days=30)
deployment = Deployment.objects.filter(scratch=False).first()
session = Session.objects.create(agent=deployment.agent, deployment=deployment, principal_id="ada",
                                 authenticator="test")
append_event(session.id, "action.approval_requested", {"callId": "c1", "tool": "cancel_order", "text": "é ✓"})
turn = Turn.objects.create(session=session, status=Turn.Status.COMPLETED, message="cancel A102",
                           started_at=timezone.now(), ended_at=timezone.now())
ToolCall.objects.create(session=session, turn=turn, call_id="c1", tool="cancel_order", input={"order_id": "A102"},
                        status=ToolCall.Status.AWAITING_APPROVAL)
# JSON null in a column that refuses SQL NULL: the move writes it as JSON null.
KVEntry.objects.create(agent=deployment.agent, key="nothing", value=Value(None, JSONField()))
"""

# Every copied table's rows as the ORM reads them (values converted by their fields), ordered by key.
DUMP = """
import json
import django
django.setup()
from agentsite.backups.convert import copied_models
tables = {}
for model in copied_models():
    fields = [f.attname for f in model._meta.local_concrete_fields]
    rows = model._base_manager.order_by("pk").values_list(*fields)
    tables[model._meta.db_table] = [json.dumps(row, sort_keys=True, default=str) for row in rows]
print(json.dumps(tables))
"""

# A new session, turn and events after the move: the keys' sequences are past the copied rows.
INSERT = """
import django
django.setup()
from agents.models import Deployment
from sessions.models import Session, Turn
from sessions.eventlog.events import append_event
deployment = Deployment.objects.filter(scratch=False).first()
session = Session.objects.create(agent=deployment.agent, deployment=deployment, principal_id="new",
                                 authenticator="test")
append_event(session.id, "test.appended", {"after": "the move"})
append_event(session.id, "test.appended", {"after": "the move", "n": 2})
Turn.objects.create(session=session, status=Turn.Status.QUEUED, message="hello")
print(session.id)
"""


def run(env: dict[str, str], script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def dump(env: dict[str, str]) -> dict[str, list[str]]:
    return json.loads(run(env, DUMP))


def without_the_held_session(tables: dict[str, list[str]], made: dict) -> dict[str, list[str]]:
    """The rows the first restore leaves as they were: it ends the held turn (its session, turn and log change),
    makes the queued one due another task, and ends the scheduled backup run the archive caught running."""
    def kept(name: str, row: list) -> bool:
        if name == "agent_sessions_turn":
            return row[0] not in (made["turn"], made["queued"])
        if name == "agent_sessions_backuprun":
            return "running" not in row and "still running when the backup this database was restored from " \
                "was taken" not in row
        return made["held"] not in row

    return {name: [row for row in rows if kept(name, json.loads(row))] for name, rows in tables.items()}


def without_the_queued_turn(tables: dict[str, list[str]], made: dict) -> dict[str, list[str]]:
    """Every restore makes the queued turn due another task at once (it restamps `lease_until`)."""
    return {**tables, "agent_sessions_turn": [row for row in tables["agent_sessions_turn"]
                                              if json.loads(row)[0] != made["queued"]]}


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "sqlite-source"
    env = state_env(root, AGENTSITE_SECRETS_KEYS=KEY)
    made = fill(root, env)
    run(env, MORE)
    manage_ok(env, "secrets", "set", "shop", "API_TOKEN", stdin="s3cret\n")
    return env, made


@pytest.mark.timeout(600)
def test_a_sqlite_server_moves_to_postgresql_and_back_with_every_row(source, tmp_path):
    env, made = source
    before = dump(env)
    assert before["agent_sessions_personaltoken"] and before["agents_secret"] and before["agents_releasebundle"]
    first = tmp_path / "sqlite.tar.gz"
    manifest = manage_json(env, "backup", "--out", str(first))
    with postgres_database() as pg_url:
        pg_env = state_env(tmp_path / "pg-state", pg_url, AGENTSITE_SECRETS_KEYS=KEY)
        report = manage_json(state_env(tmp_path / "pg-state", AGENTSITE_SECRETS_KEYS=KEY), "restore", str(first),
                             "--to", pg_url)
        assert (report["vendor"], report["convertedTo"], report["lostTurnsEnded"]) == ("sqlite", "postgresql", 1)
        assert {k: report["counts"][k] for k in ("sessions", "events", "releases", "turns", "secrets")} == {
            k: manifest["counts"][k] for k in ("sessions", "events", "releases", "turns", "secrets")}
        on_pg = dump(pg_env)
        assert without_the_held_session(on_pg, made) == without_the_held_session(before, made)
        assert (tmp_path / "pg-state" / "workspaces" / "ses_files" / "notes.md").read_text() == \
            "kept across the restore\n"
        assert manage_ok(pg_env, "secrets", "list", "shop").count("API_TOKEN") == 1

        again = manage(state_env(tmp_path / "pg-state"), "restore", str(first), "--to", pg_url)
        assert again.returncode == 1 and "the target is not empty" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1

        second = tmp_path / "pg.tar.gz"
        pg_manifest = manage_json(pg_env, "backup", "--out", str(second))
        back = tmp_path / "sqlite-back"
        report = manage_json(pg_env | {"AGENTSITE_STATE_ROOT": str(back)}, "restore", str(second), "--to",
                             f"sqlite:///{back}/db.sqlite3")
        assert (report["vendor"], report["convertedTo"], report["lostTurnsEnded"]) == ("postgresql", "sqlite", 0)
        assert report["counts"] == pg_manifest["counts"]
        back_env = state_env(back, AGENTSITE_SECRETS_KEYS=KEY)
        assert without_the_queued_turn(dump(back_env), made) == without_the_queued_turn(on_pg, made)
        assert (back / "workspaces" / "ses_files" / "notes.md").exists()
        for moved in (pg_env, back_env):
            run(moved, INSERT)
        assert len(dump(back_env)["agent_sessions_event"]) == manifest["counts"]["events"] + 2 + 2


def test_an_unreachable_target_is_named_in_one_line(source, tmp_path):
    env, made = source
    archive = tmp_path / "b.tar.gz"
    manage_ok(env, "backup", "--out", str(archive))
    for url, says in (("postgres://postgres@127.0.0.1:1/nowhere", "cannot reach the database"),
                      ("mysql-ish://x", "is not a database URL"),
                      ("postgres://postgres:hunter2@127.0.0.1:5432/agentsite_no_such_db", "cannot reach the database")):
        done = manage(state_env(tmp_path / "t"), "restore", str(archive), "--to", url)
        assert done.returncode == 1 and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "hunter2" not in done.stderr
