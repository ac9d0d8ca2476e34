"""Admission with real processes: follow-ups that preempt or coalesce, stop, task sessions.

Turns run in a qcluster worker of a real `manage.py serve`; the web process
only records intent (an interrupt flag, a queued turn). `/sleep 60000` keeps a
turn inside its model call until something interrupts it. Runs on the embedded
default and on PostgreSQL + Redis.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import httpx
import pytest

from tests.sessions.test_live_stream import (
    assert_contiguous,
    dump,
    is_type,
    postgres_database,
    read_ndjson,
    redis_database,
    squeeze,
)
from tests.support import Server, run_server

BLOCKING = "/sleep 60000"  # interruptible: the turn stays in its model call until interrupted


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        env = {}
        if request.param == "postgres+redis":
            env["DATABASE_URL"] = stack.enter_context(postgres_database(migrated=True))
            env["REDIS_URL"] = stack.enter_context(redis_database())
        root = tmp_path_factory.mktemp(f"state-{request.param.replace('+', '-')}")
        yield stack.enter_context(run_server(root, env=env))


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=20) as c:
        yield c


def start(client: httpx.Client, message: str, **body) -> tuple[str, str]:
    response = client.post("/support/v1/session", json={"message": message, **body})
    assert response.status_code == 201, response.text
    return response.json()["sessionId"], response.json()["continuationToken"]


def nth(type_: str, n: int) -> Callable[[dict], bool]:
    seen = 0

    def until(event: dict) -> bool:
        nonlocal seen
        seen += event["type"] == type_
        return seen >= n

    return until


def stream_url(session_id: str, start_index: int = 0) -> str:
    return f"/support/v1/session/{session_id}/stream?startIndex={start_index}"


def by_turn(events: list[dict]) -> dict[str, list[dict]]:
    turns: dict[str, list[dict]] = {}
    for event in events:
        if event["turnId"]:
            turns.setdefault(event["turnId"], []).append(event)
    return turns


def detail(client: httpx.Client, session_id: str) -> dict:
    response = client.get(f"/support/v1/session/{session_id}")
    assert response.status_code == 200, response.text
    return response.json()


def test_a_follow_up_preempts_the_running_turn_then_runs(client):
    session_id, token = start(client, f"{BLOCKING}\nfirst")
    read_ndjson(client, stream_url(session_id), until=is_type("step.started"))  # in its model call

    follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": "second", "continuationToken": token})
    assert follow.status_code == 202, follow.text
    assert follow.json()["admission"] == "preempt"
    events = read_ndjson(client, stream_url(session_id), until=nth("session.waiting", 2))

    assert_contiguous(events, session_id)
    first, second = by_turn(events).values()
    assert [e["type"] for e in first][:3] == ["message.received", "turn.started", "step.started"]
    assert [e["type"] for e in first][-2:] == ["turn.failed", "session.waiting"]
    assert first[-2]["data"]["error"] == "turn interrupted"
    assert not {"turn.completed", "message.completed"} & {e["type"] for e in first}
    assert squeeze([e["type"] for e in second]) == [
        "message.received", "turn.started", "step.started", "message.appended",
        "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    assert second[0]["data"]["text"] == "second"
    assert next(e for e in second if e["type"] == "message.completed")["data"]["text"] == "You said: second"
    state = detail(client, session_id)
    assert state["status"] == "waiting" and state["activeTurnId"] is None
    assert events == dump(client, session_id)


def test_coalesced_follow_ups_queue_behind_the_running_turn_and_all_complete_in_order(client):
    session_id, token = start(client, "/sleep 1500\nfirst")
    read_ndjson(client, stream_url(session_id), until=is_type("step.started"))

    for text in ("second", "third"):
        follow = client.post(
            f"/support/v1/session/{session_id}/message",
            json={"message": text, "continuationToken": token, "admission": "coalesce"},
        )
        assert follow.status_code == 202, follow.text
        assert follow.json()["status"] == "running", "the follow-up should have arrived while the first turn ran"
        token = follow.json()["continuationToken"]
    events = read_ndjson(client, stream_url(session_id), until=nth("session.waiting", 3))

    assert_contiguous(events, session_id)
    assert "turn.failed" not in {e["type"] for e in events}
    turns = list(by_turn(events).values())
    assert [t[0]["data"]["text"] for t in turns] == ["/sleep 1500\nfirst", "second", "third"]
    for turn, reply in zip(turns, ["You said: first", "You said: second", "You said: third"]):
        types = [e["type"] for e in turn]
        assert types[-2:] == ["turn.completed", "session.waiting"]
        assert next(e for e in turn if e["type"] == "message.completed")["data"]["text"] == reply
    assert [t[1]["data"]["admission"] for t in turns] == ["preempt", "coalesce", "coalesce"]


def test_stop_interrupts_the_turn_and_the_session_takes_the_next_follow_up(client):
    session_id, token = start(client, BLOCKING)
    read_ndjson(client, stream_url(session_id), until=is_type("step.started"))

    stop = client.post(f"/support/v1/session/{session_id}/stop")
    assert stop.status_code == 202, stop.text
    stopped = read_ndjson(client, stream_url(session_id), until=is_type("session.waiting"))
    assert [e["type"] for e in stopped][-2:] == ["turn.failed", "session.waiting"]
    assert stopped[-2]["data"]["error"] == "turn interrupted"
    assert detail(client, session_id)["status"] == "waiting"

    again = client.post(f"/support/v1/session/{session_id}/stop")
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_running"

    follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": "after stop", "continuationToken": token})
    assert follow.status_code == 202, follow.text
    later = read_ndjson(client, stream_url(session_id, len(stopped)), until=is_type("session.waiting"))
    assert_contiguous(later, session_id, first=len(stopped))
    assert [e["type"] for e in later][-2:] == ["turn.completed", "session.waiting"]
    assert next(e for e in later if e["type"] == "message.completed")["data"]["text"] == "You said: after stop"
    assert detail(client, session_id)["status"] == "waiting"


def test_rapid_preempting_follow_ups_supersede_every_turn_admitted_before_them(client):
    """Each preempt interrupts what is in flight ahead of it, queued turns included,
    so the latest message runs next instead of waiting behind superseded ones."""
    session_id, token = start(client, f"{BLOCKING}\nA")
    read_ndjson(client, stream_url(session_id), until=is_type("step.started"))
    for text in (f"{BLOCKING}\nB", f"{BLOCKING}\nC", "D"):
        follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": text, "continuationToken": token})
        assert follow.status_code == 202, follow.text
        token = follow.json()["continuationToken"]

    # Without the fix B would sleep for a minute: the read times out and fails.
    events = read_ndjson(client, stream_url(session_id), until=nth("session.waiting", 4))
    assert_contiguous(events, session_id)
    turns = list(by_turn(events).values())
    assert [t[0]["data"]["text"].splitlines()[-1] for t in turns] == ["A", "B", "C", "D"]
    for superseded in turns[:3]:
        assert [e["type"] for e in superseded][-2:] == ["turn.failed", "session.waiting"]
        assert superseded[-2]["data"]["error"] == "turn interrupted"
    assert [e["type"] for e in turns[3]][-2:] == ["turn.completed", "session.waiting"]
    assert next(e for e in turns[3] if e["type"] == "message.completed")["data"]["text"] == "You said: D"


def test_stop_also_clears_follow_ups_coalesced_behind_the_turn(client):
    session_id, token = start(client, BLOCKING)
    read_ndjson(client, stream_url(session_id), until=is_type("step.started"))
    queued = client.post(
        f"/support/v1/session/{session_id}/message",
        json={"message": f"{BLOCKING}\nqueued", "continuationToken": token, "admission": "coalesce"},
    )
    assert queued.status_code == 202, queued.text
    token = queued.json()["continuationToken"]

    assert client.post(f"/support/v1/session/{session_id}/stop").status_code == 202
    events = read_ndjson(client, stream_url(session_id), until=nth("session.waiting", 2))
    turns = list(by_turn(events).values())
    assert len(turns) == 2
    for turn in turns:
        assert [e["type"] for e in turn][-2:] == ["turn.failed", "session.waiting"]
        assert turn[-2]["data"]["error"] == "turn interrupted"
    state = detail(client, session_id)
    assert state["status"] == "waiting" and state["activeTurnId"] is None

    follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": "next", "continuationToken": token})
    assert follow.status_code == 202, follow.text
    later = read_ndjson(client, stream_url(session_id, len(events)), until=is_type("session.waiting"))
    assert [e["type"] for e in later][-2:] == ["turn.completed", "session.waiting"]


def test_deleting_sessions_mid_turn_frees_their_workers(client):
    """serve runs two turn workers. Park both in a minute-long model call, delete both
    sessions: the workers must give those turns up, or the next turn waits a minute."""
    blocked = [start(client, BLOCKING)[0] for _ in range(2)]
    for session_id in blocked:
        read_ndjson(client, stream_url(session_id), until=is_type("step.started"))
    for session_id in blocked:
        assert client.delete(f"/support/v1/session/{session_id}").status_code == 204

    session_id, _ = start(client, "still served")
    events = read_ndjson(client, stream_url(session_id), until=is_type("session.waiting"))
    assert [e["type"] for e in events][-2:] == ["turn.completed", "session.waiting"]


def test_a_task_session_completes_and_its_stream_ends_by_itself(client):
    session_id, token = start(client, "do the task", mode="task")
    events = read_ndjson(client, stream_url(session_id))  # no stop condition: the server must end it

    assert squeeze([e["type"] for e in events]) == [
        "session.started", "agent.bound", "message.received", "turn.started", "step.started",
        "message.appended", "message.completed", "step.completed", "turn.completed", "session.completed",
    ]
    assert_contiguous(events, session_id)
    assert detail(client, session_id)["status"] == "completed"
    # A reader arriving later replays and is let go too.
    assert read_ndjson(client, stream_url(session_id)) == events

    follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": "more", "continuationToken": token})
    assert follow.status_code == 409 and follow.json()["error"]["code"] == "task_session"
    by_token = client.post("/support/v1/session", json={"message": "more", "continuationToken": token})
    assert by_token.status_code == 409 and by_token.json()["error"]["code"] == "task_session"
    assert dump(client, session_id) == events


def test_a_failed_task_session_ends_its_stream_with_session_failed(client):
    session_id, _ = start(client, "/fail the backend is down", mode="task")
    events = read_ndjson(client, stream_url(session_id))

    assert [e["type"] for e in events][-2:] == ["turn.failed", "session.failed"]
    assert events[-2]["data"]["error"] == "the backend is down"
    assert detail(client, session_id)["status"] == "failed"
