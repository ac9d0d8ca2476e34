"""Management commands started from a folder other than the project's: relative paths mean the caller's folder."""
from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.agentsite.test_serve import write_agent
from tests.sessions.test_live_stream import is_type, read_ndjson
from tests.support import ROOT, child_env, migrated_database, premigrate, run_server

GREETER = 'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", description="Says hello.")\n'


def test_serve_from_another_folder_runs_a_turn_with_paths_relative_to_that_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_agent(elsewhere / "mine" / "greeter", agent_py=GREETER)
    # Both relative to `elsewhere`; the database path is one every process must agree on.
    env = {"DATABASE_URL": "sqlite:///here.sqlite3"}
    shutil.copyfile(migrated_database(), elsewhere / "here.sqlite3")  # serve's migrate has nothing to do
    with run_server(tmp_path / "state", "--no-examples", "--agents", "mine", env=env, cwd=elsewhere) as server:
        assert f"agent greeter: v1 (scripted:echo) from {elsewhere / 'mine' / 'greeter'}" in server.output()
        with server.client() as client:
            created = client.post("/greeter/v1/session", json={"message": "hi from elsewhere"})
            assert created.status_code == 201, created.text
            events = read_ndjson(client, f"/greeter/v1/session/{created.json()['sessionId']}/stream",
                                 until=is_type("session.waiting"))
        assert [e["type"] for e in events][-2] == "turn.completed"
        reply = next(e for e in events if e["type"] == "message.completed")["data"]["text"]
        assert reply == "You said: hi from elsewhere"
    with contextlib.closing(sqlite3.connect(elsewhere / "here.sqlite3")) as db:  # the file the server used
        assert db.execute("SELECT count(*) FROM agent_sessions_session WHERE id = ?",
                          (created.json()["sessionId"],)).fetchone() == (1,)
    assert "Traceback" not in server.output()


def manage(cwd: Path, state_root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=cwd,
                          env=child_env(AGENTSITE_STATE_ROOT=str(state_root)),
                          capture_output=True, text=True, timeout=90)


def test_validate_deploy_run_and_trajectory_from_another_folder_read_paths_relative_to_it(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_agent(elsewhere / "mine" / "greeter", agent_py=GREETER)
    state = tmp_path / "state"

    validated = manage(elsewhere, state, "validate", "mine/greeter")
    assert validated.returncode == 0, validated.stderr
    assert "mine/greeter: ok (greeter, scripted:echo" in validated.stdout

    state.mkdir(exist_ok=True)
    premigrate(state)  # deploy's migrate has nothing to do
    deployed = manage(elsewhere, state, "deploy", "mine")
    assert deployed.returncode == 0, deployed.stderr
    assert "greeter: v1 " in deployed.stdout and str(elsewhere / "mine" / "greeter") in deployed.stdout

    ran = manage(elsewhere, state, "run", "greeter", "--json", "-m", "hello")
    assert ran.returncode == 0, ran.stderr
    trajectory = json.loads(ran.stdout)
    assert "You said: hello" in json.dumps(trajectory)

    events = [{"sessionId": "ses_file", "turnId": "turn_file", "type": "message.received", "data": {"text": "hi"}},
              {"sessionId": "ses_file", "turnId": "turn_file", "type": "message.completed", "data": {"text": "from a file"}}]
    (elsewhere / "events.ndjson").write_text("".join(json.dumps(e) + "\n" for e in events))
    replayed = manage(elsewhere, state, "trajectory", "--events", "events.ndjson")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["turns"][0]["reply"] == "from a file"
    missing = manage(elsewhere, state, "trajectory", "--events", "nowhere.ndjson")
    assert missing.returncode != 0 and "no file nowhere.ndjson" in missing.stderr
