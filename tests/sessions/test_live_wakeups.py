"""Wake-ups reach a stream from the worker process, with the poll out of the picture.

The server polls every 60 s here, so a reader that gets a follow-up's events
within the read timeout was woken: by the web process's doorbell on the
embedded default, by PostgreSQL's NOTIFY from the worker's transaction on
PostgreSQL (no channel-layer message is sent for events there).
"""
from __future__ import annotations

import contextlib
import json
from typing import Iterator

import pytest

from tests.support import Server, backend_env, run_server

NO_POLL = {"AGENTSITE_STREAM_POLL_RUNNING": "60", "AGENTSITE_STREAM_POLL_IDLE": "60"}


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        env = {**backend_env(stack, request.param, migrated=True), **NO_POLL}
        root = tmp_path_factory.mktemp(f"state-{request.param.replace('+', '-')}")
        yield stack.enter_context(run_server(root, env=env))


def lines_until_waiting(lines: Iterator[str]) -> list[dict]:
    events = []
    for line in lines:
        if line:
            events.append(json.loads(line))
            if events[-1]["type"] == "session.waiting":
                return events
    raise AssertionError(f"stream ended before session.waiting: {events}")


def test_follow_ups_reach_an_open_stream_without_polling(server):
    with server.client(timeout=15) as client:  # a read stalled until the 60 s poll fails here
        created = client.post("/support/v1/session", json={"message": "one"})
        assert created.status_code == 201, created.text
        session_id, token = created.json()["sessionId"], created.json()["continuationToken"]
        with client.stream("GET", f"/support/v1/session/{session_id}/stream?startIndex=0") as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            seen = lines_until_waiting(lines)
            for text in ("two", "three"):
                sent = client.post(f"/support/v1/session/{session_id}/message",
                                   json={"message": text, "continuationToken": token})
                assert sent.status_code == 202, sent.text
                token = sent.json()["continuationToken"]
                later = lines_until_waiting(lines)
                assert later[0]["type"] == "message.received" and later[0]["data"]["text"] == text
                seen += later
    assert [e["index"] for e in seen] == list(range(len(seen)))
    assert server.output().count("Traceback") == 0
