"""A live server under AGENTSITE_LOG_FORMAT=json: every line it writes is JSON, each settled turn has
exactly one `agentsite.turns` line with its ids, each request one `agentsite.access` line, and what a
caller typed (message text, a tool's input) is in none of them."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from websockets.sync.client import connect

from tests.support import read_stream_until, run_server

MARKER = "MARKER-3b9e71c04d2a"
SESSIONS = 10  # two turns each; the last one's second fails
SESSION = "<slug:slug>/v1/session"
DETAIL = "<slug:slug>/v1/session/<str:session_id>"


@pytest.mark.parametrize("web_server", ["uvicorn", "daphne"])
def test_a_json_server_writes_one_line_per_turn_and_per_request_and_nothing_else(tmp_path, web_server):
    made: list[tuple[str, str | None, int, str | None]] = []  # method, route, status, sessionId
    turns: dict[str, dict] = {}  # turnId: its turn.completed or turn.failed event, with its sessionId
    with run_server(tmp_path / "state", "--no-schedules", "--server", web_server,
                    env={"AGENTSITE_LOG_FORMAT": "json"}) as server, server.client(timeout=30) as client:
        for n in range(SESSIONS):
            created = client.post("/support/v1/session", json={
                "message": f"order {MARKER}-message\n/call lookup_order "
                           f'{{"order_id": "A10{n % 3}", "note": "{MARKER}-input"}}'})
            assert created.status_code == 201, created.text
            session_id = created.json()["sessionId"]
            made.append(("POST", SESSION, 201, None))
            read_stream_until(client, f"/support/v1/session/{session_id}/stream", "session.waiting")
            made.append(("GET", f"{DETAIL}/stream", 200, session_id))
            again = f"/fail {MARKER}-error" if n == SESSIONS - 1 else f"{MARKER}-again"
            sent = client.post(f"/support/v1/session/{session_id}/message", json={"message": again})
            assert sent.status_code == 202, sent.text
            made.append(("POST", f"{DETAIL}/message", 202, session_id))
            events = read_stream_until(client, f"/support/v1/session/{session_id}/stream", "session.waiting",
                                       count=2)
            made.append(("GET", f"{DETAIL}/stream", 200, session_id))
            assert f"{MARKER}-input" in json.dumps(events)  # the tool was called with it
            ended = [e for e in events if e["type"] in ("turn.completed", "turn.failed")]
            assert len(ended) == 2, events
            turns.update({e["turnId"]: {**e, "sessionId": session_id} for e in ended})
        url = server.base_url.replace("http", "ws") + f"/support/v1/session/{session_id}/ws"
        with connect(url, additional_headers={"Origin": server.base_url}, open_timeout=10) as ws:
            json.loads(ws.recv(timeout=10))
        made.append(("WEBSOCKET", f"{DETAIL}/ws", 101, session_id))
        missing = client.get("/support/v1/session/ses_0000000000000000000000000000")
        made.append(("GET", DETAIL, missing.status_code, "ses_0000000000000000000000000000"))
        nowhere = client.get("/no/such/page")
        made.append(("GET", None, nowhere.status_code, None))
        assert (missing.status_code, nowhere.status_code) == (404, 404)
    output = server.output()  # the server has stopped: every process's lines are in

    lines = [json.loads(line) for line in output.splitlines()]  # each one JSON, or this fails
    assert MARKER not in output

    turn_lines = [line for line in lines if line["logger"] == "agentsite.turns"]
    assert Counter(line["turnId"] for line in turn_lines) == Counter(turns.keys())  # each once
    for line in turn_lines:
        event = turns[line["turnId"]]
        assert line["sessionId"] == event["sessionId"] and line["level"] == "INFO"
        assert (line["agent"], line["status"], line["code"]) == (
            ("support", "completed", None) if event["type"] == "turn.completed" else ("support", "failed", event["data"]["code"]))
        assert line["model"].startswith("scripted:") and line["durationMs"] > 0
        assert line["tokens"]["inputTokens"] > 0 or line["status"] == "failed"  # the failing call counted none
        assert "costUsd" in line and "traceId" not in line

    access = [line for line in lines if line["logger"] == "agentsite.access"]
    # Not ours: the readiness polls of run_server, and one it gave up on before any answer (a busy
    # machine), which reached no route and has no status.
    ours = Counter((a["method"], a["route"], a["status"], a.get("sessionId")) for a in access
                   if a["route"] != "healthz" and not (a["route"] is None and a["status"] is None))
    assert ours == Counter(made)
    for line in access:
        assert line["durationMs"] >= 0 and line["level"] == "INFO"
        assert line["principalId"] == ("local" if line["route"] not in (None, "healthz") else None)
    streams = [a for a in access if a["route"] == f"{DETAIL}/stream"]
    assert min(a["durationMs"] for a in streams) > 0
    assert Counter(line["status"] for line in turn_lines) == {"completed": 2 * SESSIONS - 1, "failed": 1}
