"""A session keeps its A/B variant across a restart of the server: real `manage.py serve`
processes on one state root, a follow-up after the restart runs under the same variant."""
from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.sessions.experiment_support import handed, write_ab_agent
from tests.support import Server, run_server

TOKEN = "ab-restart-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = pytest.mark.timeout(180)


def settled(server: Server, session_id: str, turns: int) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = httpx.get(f"{server.base_url}/abtest/v1/session/{session_id}/events", headers=HEADERS,
                          timeout=10).text.splitlines()
        events = [json.loads(line) for line in lines if line]
        if sum(e["type"] in ("turn.completed", "turn.failed") for e in events) >= turns:
            return events
        time.sleep(0.1)
    raise AssertionError(f"{session_id} did not settle {turns} turn(s):\n{server.output()}")


def test_a_follow_up_after_a_restart_keeps_the_sessions_variant(tmp_path):
    samples = tmp_path / "samples.jsonl"
    agents, state = tmp_path / "agents", tmp_path / "state"
    write_ab_agent(agents, samples)
    args = ("--no-examples", "--agents", str(agents), "--bearer-token", TOKEN)
    with run_server(state, *args) as server:
        created = httpx.post(f"{server.base_url}/abtest/v1/session", headers=HEADERS, timeout=10,
                             json={"message": "[ab:terse]\n/call which_variant {}"})
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        settled(server, session_id, 1)
    with run_server(state, *args) as again:
        sent = httpx.post(f"{again.base_url}/abtest/v1/session/{session_id}/message", headers=HEADERS, timeout=10,
                          json={"message": "/call which_variant {}"})
        assert sent.status_code == 202, sent.text
        events = settled(again, session_id, 2)
    assert [e["data"]["variant"] for e in events if e["type"] == "ab.assigned"] == ["terse"]
    outputs = [e["data"]["output"] for e in events if e["type"] == "action.result"]
    assert outputs == [{"abs": {"tone": "terse"}}] * 2
    assert [(s["variant"], s["sessionId"]) for s in handed(samples)] == [("terse", session_id)] * 2
