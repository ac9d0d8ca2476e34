"""AGENTSITE_LOG_FORMAT=json: one JSON object a line, carrying the session and turn it is about."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

from sessions.plumbing.logcontext import JsonFormatter, about
from tests.support import ROOT, child_env, read_stream_until, run_server


def formatted(record: logging.LogRecord) -> dict:
    return json.loads(JsonFormatter().format(record))


def record(message: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("agentsite.test", logging.WARNING, __file__, 1, message, args, exc_info)


def test_a_line_carries_the_ids_of_the_block_it_is_logged_in_and_no_others():
    with about(sessionId="ses_1"):
        with about(turnId="trn_2"):
            inner = formatted(record("turn %s", "trn_2"))
        outer = formatted(record("after"))
    outside = formatted(record("later"))

    assert (inner["sessionId"], inner["turnId"], inner["message"], inner["level"]) == ("ses_1", "trn_2", "turn trn_2",
                                                                                       "WARNING")
    assert outer["sessionId"] == "ses_1" and "turnId" not in outer
    assert "sessionId" not in outside and outside["logger"] == "agentsite.test"


def test_an_exception_is_kept_in_the_line():
    try:
        raise ValueError("no such order")
    except ValueError:
        line = formatted(record("failed", exc_info=sys.exc_info()))

    assert "ValueError: no such order" in line["exception"]


def test_a_live_workers_lines_name_the_session_and_turn_they_are_about(tmp_path):
    env = {"AGENTSITE_LOG_FORMAT": "json", "AGENTSITE_LOG_LEVEL": "INFO"}
    with run_server(tmp_path / "state", "--no-schedules", env=env) as server, server.client(timeout=20) as client:
        created = client.post("/ops/v1/session", json={"message": "Status of payments?"})
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        events = read_stream_until(client, f"/ops/v1/session/{session_id}/stream", "session.waiting")
        turn_id = next(e["turnId"] for e in events if e["type"] == "turn.completed")

        # The ops agent's hook logs each turn's end (examples/ops/agent/hooks/log_turns.py), in the
        # worker's own output, which may reach the log a moment after the stream has the event.
        (ended,) = lines_of(server, "agentsite.examples.ops")
        assert (ended["sessionId"], ended["turnId"]) == (session_id, turn_id)
        assert ended["message"] == f"ops turn {turn_id} ended with turn.completed"



def lines_of(server, logger: str, timeout: float = 10) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
        found = [line for line in lines if line["logger"] == logger]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_an_unknown_format_stops_the_server_from_starting_and_says_what_to_set(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path), AGENTSITE_LOG_FORMAT="yaml"))

    assert done.returncode != 0
    assert "AGENTSITE_LOG_FORMAT='yaml': use 'text' (the default) or 'json'" in done.stderr
