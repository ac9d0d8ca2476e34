"""A turn in one request over real HTTP: a real `manage.py serve` answers the POST while a
qcluster worker, another process, runs the turn. The stream ends at the turn's own end (not
at the end of a turn it preempted), and a client that leaves mid-stream does not stop the turn.
Run under both ASGI servers `serve` offers.
"""
from __future__ import annotations

import contextlib
import json
import time
from typing import Iterator

import httpx
import pytest

from tests.support import Server, run_server

SLOW_AGENT = """\
from agents.sdk import Agent

agent = Agent(model="scripted:echo", params={"chunk_delay_ms": 40})
"""
LONG_MESSAGE = " ".join(f"w{i:03d}" for i in range(150))  # ~25 chunks: about a second of streaming


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    (agents / "slow" / "agent").mkdir(parents=True)
    (agents / "slow" / "agent" / "agent.py").write_text(SLOW_AGENT)
    (agents / "slow" / "agent" / "instructions.md").write_text("Echo the user, slowly.\n")
    with run_server(tmp_path_factory.mktemp(f"state-{request.param}"), "--agents", str(agents),
                    "--server", request.param) as live:
        yield live


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=30) as c:
        yield c


def post_stream(client: httpx.Client, path: str, body: dict, *, leave_after: int | None = None
                ) -> tuple[httpx.Headers, list[dict]]:
    """POST with Accept: application/x-ndjson and read the events until the server ends the
    stream (or, with `leave_after`, until that many events came, and hang up)."""
    events: list[dict] = []
    with client.stream("POST", path, json=body, headers={"Accept": "application/x-ndjson"}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
                if leave_after is not None and len(events) >= leave_after:
                    break
        return response.headers, events


def dump(client: httpx.Client, session_id: str, slug: str = "slow") -> list[dict]:
    response = client.get(f"/{slug}/v1/session/{session_id}/events")
    return [json.loads(line) for line in response.text.splitlines() if line]


def wait_for_status(client: httpx.Client, session_id: str, status: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while client.get(f"/slow/v1/session/{session_id}").json()["status"] != status:
        assert time.monotonic() < deadline, f"the session never became {status}"
        time.sleep(0.1)


def test_create_then_follow_up_each_in_one_request_end_at_their_turns_end(client):
    headers, first = post_stream(client, "/slow/v1/session", {"message": "hello"})
    session_id = headers["X-Session-Id"]
    assert first[0]["type"] == "session.started" and first[-1]["type"] == "session.waiting"
    assert [e["index"] for e in first] == list(range(len(first)))

    again, second = post_stream(client, f"/slow/v1/session/{session_id}/message",
                                {"message": "again", "continuationToken": headers["X-Continuation-Token"]})
    assert again["X-Session-Id"] == session_id
    assert again["X-Continuation-Token"] != headers["X-Continuation-Token"]
    assert second[0]["index"] == len(first) and second[0]["type"] == "message.received"
    assert second[-1]["type"] == "session.waiting"
    assert first + second == dump(client, session_id)


def test_a_client_that_leaves_mid_stream_does_not_stop_the_turn(client):
    headers, seen = post_stream(client, "/slow/v1/session", {"message": LONG_MESSAGE}, leave_after=6)
    session_id = headers["X-Session-Id"]
    assert "turn.completed" not in [e["type"] for e in seen]

    wait_for_status(client, session_id, "waiting")
    events = dump(client, session_id)
    assert events[:len(seen)] == seen
    assert [e["type"] for e in events][-2:] == ["turn.completed", "session.waiting"]
    assert next(e for e in events if e["type"] == "message.completed")["data"]["text"] == f"You said: {LONG_MESSAGE}"


def test_a_streamed_follow_up_that_preempts_a_turn_ends_at_its_own_turns_end(client):
    created = client.post("/slow/v1/session", json={"message": LONG_MESSAGE}).json()
    session_id = created["sessionId"]
    with contextlib.suppress(httpx.ReadTimeout):  # wait until the first turn streams its reply
        with client.stream("GET", f"/slow/v1/session/{session_id}/stream", timeout=10) as live:
            for line in live.iter_lines():
                if line and json.loads(line)["type"] == "message.appended":
                    break

    headers, events = post_stream(client, f"/slow/v1/session/{session_id}/message",
                                  {"message": "stop that", "continuationToken": created["continuationToken"]})

    mine = events[-1]["turnId"]
    assert events[-1]["type"] == "session.waiting" and mine != created["turnId"]
    texts = [e["data"]["text"] for e in events if e["type"] == "message.completed"]
    assert texts[-1] == "You said: stop that"
    # The preempted turn's own ending, if it came after the follow-up was admitted, did not end the stream.
    ended = [(e["type"], e["turnId"]) for e in events if e["type"] in ("turn.failed", "session.waiting")]
    assert ended[-1] == ("session.waiting", mine)
    assert all(turn == created["turnId"] for _, turn in ended[:-1])
    assert events == dump(client, session_id)[events[0]["index"]:]
