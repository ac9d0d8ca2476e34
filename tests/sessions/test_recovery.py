"""Recovery of turns whose worker died.

Unit level: `sweep()` against rows set up directly (a lapsed lease, a dead
claiming process, a lost queued task). Process level: a real `manage.py
serve`, a qcluster worker killed with SIGKILL mid-turn; the survivors' sweep
ends the turn with `turn.failed` (`worker_lost`) and the session goes on.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
from datetime import timedelta
from typing import Iterator

import httpx
import psutil
import pytest
from django.utils import timezone

from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall, Turn
from sessions.turn.recovery import LOST_ERROR, fail_lost_turn, sweep
from tests.support import Server, read_stream_until, run_server

transactional = pytest.mark.django_db(transaction=True)


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def idle_session(client, **fields) -> Session:
    """A session whose first turn has completed (turns run inline)."""
    response = post_json(client, "/support/v1/session", {"message": "hello", **fields})
    assert response.status_code == 201, response.content
    return Session.objects.get(pk=response.json()["sessionId"])


def running_turn(session: Session, *, lease: timedelta, claimed_by: str = "gone-host:4242") -> Turn:
    """A turn as a worker leaves it mid-run: claimed, leased, holding the session."""
    turn = Turn.objects.create(
        session=session, status=Turn.Status.RUNNING, message="do the long thing", claimed_by=claimed_by,
        started_at=timezone.now(), lease_until=timezone.now() + lease,
    )
    Session.objects.filter(pk=session.pk).update(active_turn=turn, status=Session.Status.RUNNING)
    return turn


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def types_after(session: Session, start: int) -> list[str]:
    found = read_events(session.id)
    assert [e["index"] for e in found] == list(range(len(found)))
    return [e["type"] for e in found[start:]]


@transactional
def test_sweep_ends_a_turn_whose_lease_lapsed_and_leaves_a_live_one(alice, support_agent, sync_turns):
    lost_session, live_session = idle_session(alice), idle_session(alice)
    lost_start, live_start = lost_session.next_event_index, live_session.next_event_index
    lost = running_turn(lost_session, lease=timedelta(seconds=-1))
    live = running_turn(live_session, lease=timedelta(seconds=30))

    assert sweep() == 1

    lost.refresh_from_db(), live.refresh_from_db()
    assert (lost.status, lost.error, lost.lease_until) == (Turn.Status.FAILED, LOST_ERROR, None)
    assert live.status == Turn.Status.RUNNING
    assert types_after(lost_session, lost_start) == ["turn.failed", "session.waiting"]
    failed = read_events(lost_session.id)[-2]
    assert failed["turnId"] == lost.id
    assert failed["data"]["code"] == "worker_lost" and failed["data"]["error"] == LOST_ERROR
    assert types_after(live_session, live_start) == []
    lost_session.refresh_from_db(), live_session.refresh_from_db()
    assert (lost_session.status, lost_session.active_turn_id) == (Session.Status.WAITING, None)
    assert (live_session.status, live_session.active_turn_id) == (Session.Status.RUNNING, live.id)


@transactional
def test_sweeping_twice_ends_the_turn_once(alice, support_agent, sync_turns):
    session = idle_session(alice)
    start = session.next_event_index
    lost = running_turn(session, lease=timedelta(seconds=-1))

    assert sweep() == 1
    assert sweep() == 0
    assert fail_lost_turn(lost) is False, "the conditional update lets only one recoverer win"

    assert types_after(session, start) == ["turn.failed", "session.waiting"]


@transactional
def test_a_turn_of_a_dead_process_on_this_host_is_ended_before_its_lease_lapses(alice, support_agent, sync_turns):
    session = idle_session(alice)
    start = session.next_event_index
    dead = running_turn(session, lease=timedelta(seconds=30), claimed_by=f"{socket.gethostname()}:{dead_pid()}")
    alive = running_turn(idle_session(alice), lease=timedelta(seconds=30),
                         claimed_by=f"{socket.gethostname()}:{os.getpid()}")

    assert sweep() == 1

    dead.refresh_from_db(), alive.refresh_from_db()
    assert (dead.status, alive.status) == (Turn.Status.FAILED, Turn.Status.RUNNING)
    assert types_after(session, start) == ["turn.failed", "session.waiting"]


@transactional
def test_a_call_that_had_started_is_reported_interrupted_and_never_run_again(alice, support_agent, sync_turns):
    session = idle_session(alice)
    start = session.next_event_index
    lost = running_turn(session, lease=timedelta(seconds=-1))
    ToolCall.objects.create(session=session, turn=lost, call_id="call_a", tool="refund_order",
                            input={"order_id": "A100", "reason": "x"}, status=ToolCall.Status.RUNNING,
                            started_at=timezone.now())
    ToolCall.objects.create(session=session, turn=lost, call_id="call_b", tool="lookup_order",
                            input={"order_id": "A101"}, status=ToolCall.Status.REQUESTED)
    ToolCall.objects.create(session=session, turn=lost, call_id="call_c", tool="lookup_order",
                            input={"order_id": "A102"}, status=ToolCall.Status.DONE, output={"ok": True})

    assert sweep() == 1

    assert types_after(session, start) == ["action.result", "action.result", "turn.failed", "session.waiting"]
    first, second = (e["data"] for e in read_events(session.id, start)[:2])
    assert (first["callId"], first["error"]) == (
        "call_a", "interrupted: the worker running this call was lost; it was not run again")
    assert (second["callId"], second["error"]) == ("call_b", "not run: the worker running this turn was lost")
    statuses = dict(ToolCall.objects.filter(turn=lost).values_list("call_id", "status"))
    assert statuses == {"call_a": "interrupted", "call_b": "interrupted", "call_c": "done"}


@transactional
def test_the_session_takes_a_follow_up_after_recovery_and_keeps_the_lost_input(alice, support_agent, sync_turns):
    session = idle_session(alice)
    running_turn(session, lease=timedelta(seconds=-1))
    sweep()

    follow = post_json(alice, f"/support/v1/session/{session.id}/message", {"message": "are you there?"})

    assert follow.status_code == 202, follow.content
    found = read_events(session.id)
    assert [e["type"] for e in found][-2:] == ["turn.completed", "session.waiting"]
    assert [e for e in found if e["type"] == "message.completed"][-1]["data"]["text"] == "You said: are you there?"
    session.refresh_from_db()
    assert {"role": "user", "content": "do the long thing"} in session.conversation


@transactional
def test_a_lost_turn_of_a_task_session_fails_the_session(alice, support_agent, sync_turns):
    session = idle_session(alice, mode="task")
    start = session.next_event_index
    running_turn(session, lease=timedelta(seconds=-1))

    assert sweep() == 1

    assert types_after(session, start) == ["turn.failed", "session.failed"]
    session.refresh_from_db()
    assert session.status == Session.Status.FAILED


@transactional
def test_sweep_reenqueues_an_active_turn_whose_task_was_lost_once(alice, support_agent, sync_turns, settings):
    session = idle_session(alice)
    start = session.next_event_index
    stale = Turn.objects.create(session=session, message="still there?", created_at=timezone.now() - timedelta(minutes=5))
    Session.objects.filter(pk=session.pk).update(active_turn=stale, status=Session.Status.RUNNING)

    assert sweep() == 0  # nothing ended; the queued turn is handed to a worker again (inline here)

    stale.refresh_from_db()
    assert stale.status == Turn.Status.COMPLETED
    types = types_after(session, start)
    assert types[0] == "message.received" and types[-2:] == ["turn.completed", "session.waiting"]
    sweep()
    assert types_after(session, start) == types, "a turn runs once"


@transactional
def test_a_pass_leaves_fresh_queued_turns_alone_in_one_read_however_many_there_are(alice, support_agent, sync_turns):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queue_fresh(n: int) -> list[Turn]:
        turns = []
        for _ in range(n):
            session = idle_session(alice)
            turn = Turn.objects.create(session=session, message="queued just now")
            Session.objects.filter(pk=session.pk).update(active_turn=turn, status=Session.Status.RUNNING)
            turns.append(turn)
        return turns

    counts = []
    for n in (1, 4):
        turns = queue_fresh(n)
        with CaptureQueriesContext(connection) as pass_:
            assert sweep() == 0
        counts.append(len(pass_.captured_queries))
        writes = [q["sql"] for q in pass_.captured_queries if not q["sql"].lstrip().upper().startswith("SELECT")]
        assert writes == [], writes
        for turn in turns:
            turn.refresh_from_db()
            assert turn.status == Turn.Status.QUEUED and turn.lease_until is None, "not handed out again"
        Session.objects.filter(active_turn__in=turns).update(active_turn=None, status=Session.Status.WAITING)
    assert counts[0] == counts[1], counts


# --- a worker killed mid-turn: real processes -----------------------------------------

SLOW_TOOL = '''\
import time
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    seconds: float = 60


@tool(description="A long job.", effect="write")
def slow_job(input: Input, ctx) -> str:
    with open({path!r}, "a") as f:
        f.write("start " + ctx.call_id + "\\n")
    deadline = time.monotonic() + input.seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    with open({path!r}, "a") as f:
        f.write("end " + ctx.call_id + "\\n")
    return "done"
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    side_effects = agents / "side-effects.txt"
    (agents / "jobs" / "agent" / "tools").mkdir(parents=True)
    (agents / "jobs" / "agent" / "instructions.md").write_text("You run jobs.\n")
    (agents / "jobs" / "agent" / "tools" / "slow_job.py").write_text(SLOW_TOOL.format(path=str(side_effects)))
    with run_server(tmp_path_factory.mktemp("state"), "--agents", str(agents), "--no-examples") as running:
        running.side_effects = side_effects
        yield running


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=20) as c:
        yield c


def wait_for(condition, what: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def claimed_by(server: Server, turn_id: str) -> str:
    """Read the turn's claim from the server's own database (the API does not expose it)."""
    with sqlite3.connect(server.state_root / "db.sqlite3", timeout=10) as db:
        row = db.execute("SELECT status, claimed_by FROM agent_sessions_turn WHERE id = ?", [turn_id]).fetchone()
    return row[1] if row and row[0] == "running" else ""


def kill_worker_of(server: Server, turn_id: str) -> float:
    """SIGKILL the qcluster worker process running the turn; returns when it was killed."""
    host, _, pid = wait_for(lambda: claimed_by(server, turn_id), "the turn to be claimed").rpartition(":")
    assert host == socket.gethostname()
    worker = psutil.Process(int(pid))
    assert worker.pid in {p.pid for p in psutil.Process(server.process.pid).children(recursive=True)}, \
        "the claiming process should be one of serve's workers"
    os.kill(worker.pid, signal.SIGKILL)
    return time.monotonic()


def side_effects(server: Server) -> list[str]:
    return server.side_effects.read_text().splitlines() if server.side_effects.exists() else []


def start(client: httpx.Client, message: str) -> tuple[str, str, str]:
    response = client.post("/jobs/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    body = response.json()
    return body["sessionId"], body["turnId"], body["continuationToken"]


def assert_recovered_once(events: list[dict], session_id: str, turn_id: str) -> None:
    assert [e["index"] for e in events] == list(range(len(events)))
    assert {e["sessionId"] for e in events} == {session_id}
    mine = [e for e in events if e["turnId"] == turn_id]
    assert [e["type"] for e in mine].count("turn.started") == 1, "the turn ran once"
    failed = [e for e in events if e["type"] == "turn.failed"]
    assert len(failed) == 1 and failed[0]["turnId"] == turn_id
    assert failed[0]["data"]["code"] == "worker_lost" and failed[0]["data"]["error"] == LOST_ERROR
    assert [e["type"] for e in mine][-2:] == ["turn.failed", "session.waiting"]
    assert "turn.completed" not in {e["type"] for e in mine}


def test_a_worker_killed_during_a_tool_call_ends_the_turn_and_the_call_is_not_rerun(server, client):
    session_id, turn_id, token = start(client, '/call slow_job {"seconds": 60}')
    [started] = wait_for(lambda: side_effects(server), "the tool to start")
    call_id = started.split()[1]

    killed_at = kill_worker_of(server, turn_id)
    events = read_stream_until(client, f"/jobs/v1/session/{session_id}/stream", "session.waiting", timeout=60)
    recovery = time.monotonic() - killed_at
    print(f"\nrecovery after kill -9 during a tool call: {recovery:.2f}s (kill -> session.waiting streamed)")

    assert_recovered_once(events, session_id, turn_id)
    [result] = [e["data"] for e in events if e["type"] == "action.result"]
    assert result["callId"] == call_id
    assert result["error"] == "interrupted: the worker running this call was lost; it was not run again"
    assert client.get(f"/jobs/v1/session/{session_id}").json()["status"] == "waiting"

    follow = client.post(f"/jobs/v1/session/{session_id}/message",
                         json={"message": "after the crash", "continuationToken": token})
    assert follow.status_code == 202, follow.text
    events = read_stream_until(client, f"/jobs/v1/session/{session_id}/stream", "session.waiting", count=2)
    assert [e["index"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events][-2:] == ["turn.completed", "session.waiting"]
    assert [e for e in events if e["type"] == "message.completed"][-1]["data"]["text"] == "You said: after the crash"
    assert [e["type"] for e in events].count("turn.failed") == 1
    # The interrupted call started once and was never run again, nor finished.
    assert side_effects(server) == [f"start {call_id}"]


def test_a_worker_killed_during_the_model_call_ends_the_turn(server, client):
    session_id, turn_id, token = start(client, "/sleep 20000\nslow thoughts")
    read_stream_until(client, f"/jobs/v1/session/{session_id}/stream", "step.started")
    before = side_effects(server)

    killed_at = kill_worker_of(server, turn_id)
    events = read_stream_until(client, f"/jobs/v1/session/{session_id}/stream", "session.waiting", timeout=60)
    print(f"\nrecovery after kill -9 during a model call: {time.monotonic() - killed_at:.2f}s")

    assert_recovered_once(events, session_id, turn_id)
    assert "action.result" not in {e["type"] for e in events}

    follow = client.post(f"/jobs/v1/session/{session_id}/message",
                         json={"message": "try again", "continuationToken": token})
    assert follow.status_code == 202, follow.text
    events = read_stream_until(client, f"/jobs/v1/session/{session_id}/stream", "session.waiting", count=2)
    assert [e["type"] for e in events][-2:] == ["turn.completed", "session.waiting"]
    assert side_effects(server) == before
