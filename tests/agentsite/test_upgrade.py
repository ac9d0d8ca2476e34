"""An upgrade rehearsed: a database of an earlier schema, with data in every table, migrated to this code.

`tests.agentsite.earlier_database` builds it in a child process (agents and agent_sessions migrated only
to the schema of an earlier commit, rows written with that state's historical models); `manage.py
migrate` brings it forward in another; then a real `serve` reads every row back through the HTTP
API: sessions listed and in detail, each one's events exactly as written, the release (unpacked from
its stored bundle, no copy on disk), the secret and the personal token, the reminder and the artifact,
the schedule fired by hand, and the parked approval decided, its turn run to completion.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.support import ROOT, child_env, postgres_database, read_stream_until, run_server

AGENT = "support"


@contextlib.contextmanager
def database_env(kind: str, state_root: Path) -> Iterator[dict[str, str]]:
    """The environment of processes on a new, empty database of `kind` (SQLite in `state_root`)."""
    state_root.mkdir(parents=True)
    env = {"AGENTSITE_STATE_ROOT": str(state_root), "REDIS_URL": ""}
    if kind == "sqlite":
        yield {**env, "DATABASE_URL": ""}
    else:
        with postgres_database() as url:
            yield {**env, "DATABASE_URL": url}


def child(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=child_env(DJANGO_SETTINGS_MODULE="agentsite.settings",
                                                                           **env),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def events_of(client: httpx.Client, session_id: str) -> list[dict]:
    answer = client.get(f"/{AGENT}/v1/session/{session_id}/events?startIndex=0")
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in answer.text.splitlines() if line]


def as_written(events: list[dict]) -> list[dict]:
    return [{"index": e["index"], "type": e["type"], "turnId": e["turnId"], "data": e["data"]} for e in events]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_database_of_an_earlier_schema_upgrades_with_every_row_readable(tmp_path, kind):
    with database_env(kind, tmp_path / "state") as env:
        written = json.loads(child(env, "-m", "tests.agentsite.earlier_database"))
        child(env, str(ROOT / "manage.py"), "migrate", "--no-input")
        check = child(env, str(ROOT / "manage.py"), "check")
        assert "no issues" in check

        # --dev: schedules fire by hand; no examples deployed, so the release is the one written earlier.
        with run_server(tmp_path / "state", "--dev", "--no-examples", env=env, migrated=False) as server, \
                server.client() as client:
            assert f"agent {AGENT}: v1 deployed earlier" in server.output()
            read_back(client, written)
            decide_the_parked_call(client, written)
            fire_the_schedule(client, written)


def read_back(client: httpx.Client, written: dict) -> None:
    sessions = written["sessions"]
    listed = client.get(f"/{AGENT}/v1/sessions", params={"limit": 100})
    assert listed.status_code == 200, listed.text
    assert {s["sessionId"] for s in listed.json()["sessions"]} == set(sessions.values())
    for session_id in sessions.values():
        detail = client.get(f"/{AGENT}/v1/session/{session_id}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["status"] == written["statuses"][session_id]
        assert detail.json()["deployment"] == {"version": 1, "contentHash": written["contentHash"]}
        events = events_of(client, session_id)
        assert [e["index"] for e in events] == list(range(len(events)))
        assert as_written(events) == written["events"][session_id]

    release = client.get(f"/{AGENT}/v1/release")
    assert release.status_code == 200, release.text
    releases = client.get(f"/v1/agents/{AGENT}/deployments")
    assert releases.status_code == 200, releases.text
    assert [(d["version"], d["contentHash"]) for d in releases.json()["deployments"]] == [(1, written["contentHash"])]

    reminders = client.get(f"/{AGENT}/v1/session/{sessions['chat']}/reminders")
    assert reminders.status_code == 200, reminders.text
    assert [r["reminderId"] for r in reminders.json()["reminders"]] == [written["reminder"]]
    artifact = client.get(f"/{AGENT}/v1/session/{sessions['chat']}/artifacts/{written['artifact']}")
    assert artifact.status_code == 200 and artifact.content == b"the report", artifact.text

    as_alice = {"Authorization": f"Bearer {written['token']}"}
    tokens = client.get("/v1/tokens", headers=as_alice)
    assert tokens.status_code == 200, tokens.text
    assert [t["name"] for t in tokens.json()["tokens"]] == ["laptop"]
    stored = client.get(f"/v1/agents/{AGENT}/secrets", headers=as_alice)
    assert stored.status_code == 200, stored.text
    assert [s["name"] for s in stored.json()["secrets"]] == [written["secret"]]


def decide_the_parked_call(client: httpx.Client, written: dict) -> None:
    parked = written["sessions"]["parked"]
    pending = client.get(f"/{AGENT}/v1/session/{parked}/approvals")
    assert pending.status_code == 200, pending.text
    assert [a["callId"] for a in pending.json()["approvals"]] == [written["callId"]]
    decided = client.post(f"/{AGENT}/v1/session/{parked}/approvals/{written['callId']}", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    before = len(written["events"][parked])
    after = read_stream_until(client, f"/{AGENT}/v1/session/{parked}/stream?startIndex={before}", "session.waiting",
                              timeout=30)
    assert [e["index"] for e in after] == list(range(before, before + len(after)))
    kinds = [e["type"] for e in after]
    assert "action.result" in kinds and "turn.completed" in kinds, kinds
    assert as_written(events_of(client, parked))[:before] == written["events"][parked]
    assert client.get(f"/{AGENT}/v1/session/{parked}").json()["status"] == "waiting"


def fire_the_schedule(client: httpx.Client, written: dict) -> None:
    fired = client.post(f"/{AGENT}/v1/dev/schedules/{written['schedule']}")
    assert fired.status_code == 200, fired.text
    (session_id,) = fired.json()["sessionIds"]
    events = read_stream_until(client, f"/{AGENT}/v1/session/{session_id}/stream?startIndex=0", "turn.completed",
                               timeout=30)
    assert {"source": "schedule", "text": "good morning", "scheduleId": "morning"}.items() <= \
        next(e["data"] for e in events if e["type"] == "message.received").items()
