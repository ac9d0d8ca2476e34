"""The session websocket, `/<slug>/v1/session/<id>/ws?startIndex=N`, driven
through `channels.testing.WebsocketCommunicator` against the real ASGI app.

It replays from startIndex and then relays live events, including events a
different OS process appends (no wake-up can reach this process from there:
the in-memory channel layer is per process, so the follower's polling is
what delivers them). It runs the route's auth chain and ownership, refuses
foreign Origins and non-loopback Hosts under `local_dev_strict()`, and takes
`message` and `stop` frames.

Each test runs its scenario with `async_to_sync`; `database_sync_to_async`
calls made by the consumer come back to the test's thread, so they share the
test database connection.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection

from agentsite.asgi import application
from channels_app.auth import LOCAL_PRINCIPAL
from sessions.turn.admission import start_session
from sessions.eventlog.events import read_events
from sessions.models import Event, Turn
from tests.conftest import ALICE, ALICE_TOKEN, BOB_TOKEN
from tests.support import ROOT, child_env

transactional = pytest.mark.django_db(transaction=True)

HOST = "127.0.0.1:8000"
ORIGIN = f"http://{HOST}"
WAIT = 15  # seconds: the bound on every wait for a frame

# Appends `test.relayed` events in phases from another process. Phase 0 starts
# at once; phase i > 0 waits for the file `go<i>` in the gate directory, so the
# test decides what is written while it is connected and what while it is not.
WRITER = """
import os, sys, time
import django
django.setup()
from sessions.eventlog.events import append_event

session_id, gates, phases = sys.argv[1], sys.argv[2], [int(n) for n in sys.argv[3].split(",")]
seq = 0
for phase, count in enumerate(phases):
    if phase:
        gate = os.path.join(gates, f"go{phase}")
        deadline = time.monotonic() + 30
        while not os.path.exists(gate):
            if time.monotonic() > deadline:
                sys.exit(f"gate {gate} never opened")
            time.sleep(0.005)
    for _ in range(count):
        append_event(session_id, "test.relayed", {"pid": os.getpid(), "seq": seq})
        seq += 1
        time.sleep(0.005)  # pacing, so the events arrive one by one while a socket follows
    print(f"phase {phase} done", flush=True)
"""


def socket(
    path: str, *, host: str = HOST, origin: str | None = ORIGIN, token: str | None = None, peer: str = "127.0.0.1"
) -> WebsocketCommunicator:
    """A communicator with the headers a client would send, from `peer`."""
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    # The application is only instantiated on first use, so the scope can still gain the peer.
    communicator.scope["client"] = (peer, 50123)
    return communicator


def ws_path(session_id: str, start: int | str = 0, slug: str = "support") -> str:
    return f"/{slug}/v1/session/{session_id}/ws?startIndex={start}"


async def close_code(communicator: WebsocketCommunicator) -> int:
    """Connect and return the code the consumer closed with (it accepts, then refuses)."""
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    message = await communicator.receive_output(timeout=WAIT)
    assert message["type"] == "websocket.close", message
    # A consumer lives until the server reports the disconnect, as daphne would.
    await communicator.disconnect(code=message["code"], timeout=WAIT)
    return message["code"]


async def receive_until(
    communicator: WebsocketCommunicator, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """Collect JSON frames until `done(frames)` holds (each wait bounded by WAIT)."""
    frames: list[dict[str, Any]] = []
    while not done(frames):
        frames.append(json.loads(await communicator.receive_from(timeout=WAIT)))
    return frames


def count(n: int) -> Callable[[list[dict]], bool]:
    return lambda frames: len(frames) >= n


def as_json(events: list[dict]) -> list[dict]:
    return json.loads(json.dumps(events))


def started(principal=ALICE, message: str = "hello") -> str:
    """A session whose first turn has run (sync turns): events 0..9, ending in session.waiting."""
    from agents.models import Agent

    admitted = start_session(Agent.objects.get(slug="support"), principal, message)
    return admitted.session.id


def writer_env(state_root: Path) -> dict[str, str]:
    """The environment of a process that writes to this test's database file."""
    return child_env(
        DJANGO_SETTINGS_MODULE="agentsite.settings",
        AGENTSITE_STATE_ROOT=str(state_root),
        DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
    )


async def spawn_writer(session_id: str, gates: Path, phases: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, session_id, str(gates), phases,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def expect_line(process: asyncio.subprocess.Process, expected: str) -> None:
    line = await asyncio.wait_for(process.stdout.readline(), WAIT * 2)
    if line.decode().strip() != expected:
        _, err = await asyncio.wait_for(process.communicate(), WAIT)
        pytest.fail(f"writer said {line!r}, wanted {expected!r}:\n{err.decode()}")


async def finish(process: asyncio.subprocess.Process) -> None:
    try:
        _, err = await asyncio.wait_for(process.communicate(), WAIT * 2)
        assert process.returncode == 0, err.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# -- replay and live -----------------------------------------------------------

@transactional
def test_a_socket_replays_exactly_the_events_from_start_index(support_agent, two_principals, sync_turns):
    session_id = started()
    expected = as_json(read_events(session_id, 4))
    assert [e["index"] for e in expected] == list(range(4, 10))

    async def scenario() -> list[dict]:
        communicator = socket(ws_path(session_id, 4), token=ALICE_TOKEN)
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        try:
            frames = await receive_until(communicator, count(len(expected)))
            assert await communicator.receive_nothing(timeout=0.5), "nothing past the end of the log"
            return frames
        finally:
            await communicator.disconnect()

    assert async_to_sync(scenario)() == expected


@transactional
def test_a_socket_relays_events_another_process_appends(support_agent, two_principals, sync_turns, tmp_path):
    session_id = started()
    env = writer_env(tmp_path / "writer-state")

    async def scenario() -> tuple[list[dict], int]:
        communicator = socket(ws_path(session_id, 0), token=ALICE_TOKEN)
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        try:
            replay = await receive_until(communicator, lambda f: bool(f) and f[-1]["type"] == "session.waiting")
            # Connected and caught up before the other process writes anything: what follows is live.
            writer = await spawn_writer(session_id, tmp_path, "20", env)
            live = await receive_until(communicator, count(20))
            await expect_line(writer, "phase 0 done")
            await finish(writer)
            return replay + live, writer.pid
        finally:
            await communicator.disconnect()

    frames, writer_pid = async_to_sync(scenario)()

    assert [f["index"] for f in frames] == list(range(30))
    live = frames[10:]
    assert all(f["type"] == "test.relayed" and f["sessionId"] == session_id for f in live)
    assert [f["data"] for f in live] == [{"pid": writer_pid, "seq": seq} for seq in range(20)]
    assert frames == as_json(read_events(session_id)), "the frames are the stored envelopes"


@transactional
def test_reconnecting_from_the_next_index_gives_no_gap_and_no_duplicate(
    support_agent, two_principals, sync_turns, tmp_path
):
    """Live events, a drop while the writer goes on, then a reconnect that replays and follows again."""
    session_id = started()
    env = writer_env(tmp_path / "writer-state")

    async def scenario() -> tuple[list[dict], list[dict]]:
        first = socket(ws_path(session_id, 0), token=ALICE_TOKEN)
        connected, _ = await first.connect(timeout=WAIT)
        assert connected
        writer = await spawn_writer(session_id, tmp_path, "8,8,8", env)
        try:
            before = await receive_until(first, count(10 + 8))  # the first turn, then phase 0 live
            await expect_line(writer, "phase 0 done")
            await first.disconnect()

            (tmp_path / "go1").touch()  # phase 1 is written while nobody is connected
            await expect_line(writer, "phase 1 done")

            second = socket(ws_path(session_id, before[-1]["index"] + 1), token=ALICE_TOKEN)
            connected, _ = await second.connect(timeout=WAIT)
            assert connected
            try:
                (tmp_path / "go2").touch()  # phase 2 is written while the second socket follows
                after = await receive_until(second, count(16))
                await expect_line(writer, "phase 2 done")
                assert await second.receive_nothing(timeout=0.5), "nothing beyond the writer's events"
            finally:
                await second.disconnect()
            await finish(writer)
            return before, after
        finally:
            if writer.returncode is None:
                writer.kill()
                await writer.wait()

    before, after = async_to_sync(scenario)()

    indexes = [f["index"] for f in before + after]
    assert indexes == list(range(10 + 24)), "exactly 0..N-1 across the reconnect"
    relayed = [f["data"]["seq"] for f in before + after if f["type"] == "test.relayed"]
    assert relayed == list(range(24))
    assert before + after == as_json(read_events(session_id))


# -- who may connect -------------------------------------------------------------

@transactional
def test_another_principal_gets_4403_and_no_events(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    assert async_to_sync(close_code)(socket(ws_path(session_id), token=BOB_TOKEN)) == 4403


@transactional
def test_a_socket_no_policy_admits_gets_4401(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    assert async_to_sync(close_code)(socket(ws_path(session_id))) == 4401
    assert async_to_sync(close_code)(socket(ws_path(session_id), token="not-a-token")) == 4401


@transactional
def test_an_unknown_session_gets_4404(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    assert async_to_sync(close_code)(socket(ws_path("ses_doesnotexist"), token=ALICE_TOKEN)) == 4404
    # A real session under another agent's slug is unknown there too.
    assert async_to_sync(close_code)(socket(ws_path(session_id, slug="other"), token=ALICE_TOKEN)) == 4404


@transactional
def test_a_bad_start_index_gets_4400(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    assert async_to_sync(close_code)(socket(ws_path(session_id, "-1"), token=ALICE_TOKEN)) == 4400
    assert async_to_sync(close_code)(socket(ws_path(session_id, "abc"), token=ALICE_TOKEN)) == 4400


@transactional
def test_the_loopback_default_admits_a_loopback_page(support_agent, sync_turns):
    """Under local_dev_strict(): a loopback peer, Host and Origin, and the local principal's session."""
    session_id = started(LOCAL_PRINCIPAL)

    async def scenario() -> list[dict]:
        communicator = socket(ws_path(session_id), host="localhost:8000", origin="http://localhost:8000")
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        try:
            return await receive_until(communicator, count(10))
        finally:
            await communicator.disconnect()

    assert async_to_sync(scenario)() == as_json(read_events(session_id))


@transactional
def test_the_loopback_default_refuses_a_foreign_origin_with_4403(support_agent, sync_turns):
    """A page on another site must not drive a local agent through the visitor's browser."""
    session_id = started(LOCAL_PRINCIPAL)

    assert async_to_sync(close_code)(socket(ws_path(session_id), origin="http://evil.example")) == 4403
    assert async_to_sync(close_code)(socket(ws_path(session_id), origin="null")) == 4403


@transactional
def test_the_loopback_default_refuses_a_non_loopback_host(support_agent, sync_turns):
    """DNS rebinding: a foreign name that resolves to 127.0.0.1 reaches a loopback peer."""
    session_id = started(LOCAL_PRINCIPAL)
    rebound = "rebind.example:8000"

    # A browser on the rebound page sends its own origin, which matches the Host: the auth chain refuses it.
    assert async_to_sync(close_code)(
        socket(ws_path(session_id), host=rebound, origin=f"http://{rebound}")
    ) == 4401
    # Without an Origin the auth chain decides, and its Host check admits nobody.
    assert async_to_sync(close_code)(socket(ws_path(session_id), host=rebound, origin=None)) == 4401
    # Nor does a loopback Host help a peer that is not on loopback.
    assert async_to_sync(close_code)(socket(ws_path(session_id), peer="203.0.113.9")) == 4401


@transactional
def test_a_foreign_origin_is_refused_under_a_bearer_chain_too(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    assert async_to_sync(close_code)(
        socket(ws_path(session_id), origin="http://evil.example", token=ALICE_TOKEN)
    ) == 4403


# -- frames from the client ----------------------------------------------------------

@transactional
def test_a_message_frame_posts_a_follow_up_whose_events_stream_back(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    async def scenario() -> list[dict]:
        communicator = socket(ws_path(session_id), token=ALICE_TOKEN)
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        try:
            await receive_until(communicator, count(10))
            await communicator.send_json_to({"type": "message", "message": "again please"})

            def acked_and_waiting(frames: list[dict]) -> bool:
                return any(f["type"] == "ack" for f in frames) and any(f["type"] == "session.waiting" for f in frames)

            return await receive_until(communicator, acked_and_waiting)
        finally:
            await communicator.disconnect()

    frames = async_to_sync(scenario)()

    (ack,) = [f for f in frames if f["type"] == "ack"]
    turn = Turn.objects.get(pk=ack["turnId"])
    assert turn.session_id == session_id and turn.message == "again please"
    assert turn.status == Turn.Status.COMPLETED
    events = [f for f in frames if "index" in f]
    assert [e["index"] for e in events] == list(range(10, 10 + len(events)))
    assert events[0]["type"] == "message.received" and events[0]["data"]["text"] == "again please"
    assert {"text": "You said: again please"} in [e["data"] for e in events if e["type"] == "message.completed"]
    assert all(e["turnId"] == turn.id for e in events if e["type"] != "session.waiting")


@transactional
def test_stop_and_malformed_frames_are_answered_on_the_socket(support_agent, two_principals, sync_turns):
    session_id = started(ALICE)

    async def scenario() -> list[dict]:
        communicator = socket(ws_path(session_id), token=ALICE_TOKEN)
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        try:
            await receive_until(communicator, count(10))
            replies = []
            for frame in ('{"type": "stop"}', "not json", '{"type": "dance"}', '{"type": "message", "message": " "}'):
                await communicator.send_to(text_data=frame)
                replies.append(json.loads(await communicator.receive_from(timeout=WAIT)))
            return replies
        finally:
            await communicator.disconnect()

    stop, not_json, unknown, blank = async_to_sync(scenario)()

    assert stop == {"type": "ack", "stopping": False}, "nothing was running"
    assert not_json["type"] == "error" and not_json["error"]["code"] == "invalid_frame"
    assert unknown["type"] == "error" and unknown["error"]["code"] == "invalid_frame"
    assert blank["type"] == "error" and blank["error"]["code"] == "invalid_request"
    assert Event.objects.filter(session_id=session_id).count() == 10, "no frame wrote anything"


@transactional
def test_frames_with_text_the_databases_cannot_store_get_error_frames(support_agent, two_principals, sync_turns, settings):
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 20
    session_id = started(ALICE)
    frames = [
        json.dumps({"type": "message", "message": "a\ud800"}),
        json.dumps({"type": "message", "message": "a\x00"}),
        json.dumps({"type": "message", "message": "hi", "\x00": 1}),
        json.dumps({"type": "message", "message": "x" * 21}),
        "[" * 50_000 + "]" * 50_000,
        '{"type": "message", "message": 1e999}',
        json.dumps({"type": "message", "message": "hi", "admission": "later"}),
    ]

    async def scenario() -> list[dict]:
        communicator = socket(ws_path(session_id, start=10), token=ALICE_TOKEN)
        connected, _ = await communicator.connect(timeout=WAIT)
        assert connected
        try:
            replies = []
            for frame in [*frames, json.dumps({"type": "message", "message": "x" * 20})]:
                await communicator.send_to(text_data=frame)
                replies.append(json.loads(await communicator.receive_from(timeout=WAIT)))
            return replies
        finally:
            await communicator.disconnect()

    *refused, accepted = async_to_sync(scenario)()

    assert [r["error"]["code"] for r in refused] == [
        "invalid_text", "invalid_text", "invalid_text", "invalid_request", "body_too_deep", "invalid_number",
        "invalid_request",
    ]
    assert refused[0]["error"]["message"].startswith("message holds a lone surrogate")
    assert "at most 20 characters" in refused[3]["error"]["message"]
    assert accepted["type"] == "ack", "the socket still takes good frames"
    assert Turn.objects.filter(session_id=session_id).count() == 2


@transactional
@pytest.mark.parametrize("session_id,start", [("ses_x%00", "0"), ("{sid}", "%D9%A3"), ("{sid}", "%2B3"), ("{sid}", "3_0")])
def test_a_nul_session_id_or_a_non_ascii_start_index_gets_4400(support_agent, two_principals, sync_turns, session_id, start):
    path = ws_path(session_id.format(sid=started(ALICE)), start=start)

    assert async_to_sync(close_code)(socket(path, token=ALICE_TOKEN)) == 4400
