"""The event stream of real turns over real HTTP.

A real `manage.py serve` runs: its web server (uvicorn) answers the stream
while a qcluster worker, another process, writes the turn's events. The module
runs on the embedded default (SQLite, polling readers), on the scale-out
configuration (PostgreSQL, Redis broker and channel layer), and on the
embedded default under `serve --server daphne`.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import threading
import time
from typing import Callable, Iterator

import httpx
import pytest

from tests.support import Server, backend_env, postgres_database, redis_database, run_server  # noqa: F401


SLOW_AGENT = """\
from agents.sdk import Agent

# Every streamed chunk waits, so a turn stays in flight long enough to
# disconnect from and reconnect to it several times.
agent = Agent(model="scripted:echo", params={"chunk_delay_ms": 40})
"""

# ~150 words: the scripted model streams the echo in ~25 chunks.
LONG_MESSAGE = " ".join(f"w{i:03d}" for i in range(150))


@pytest.fixture(scope="module", params=[("sqlite", "uvicorn"), ("postgres+redis", "uvicorn"), ("sqlite", "daphne")],
                ids=["sqlite", "postgres+redis", "sqlite-daphne"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    backend, web = request.param
    agents = tmp_path_factory.mktemp("agents")
    (agents / "slow" / "agent").mkdir(parents=True)
    (agents / "slow" / "agent" / "agent.py").write_text(SLOW_AGENT)
    (agents / "slow" / "agent" / "instructions.md").write_text("Echo the user, slowly.\n")
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, backend, migrated=True)
        root = tmp_path_factory.mktemp(f"state-{backend.replace('+', '-')}-{web}")
        server = stack.enter_context(run_server(root, "--agents", str(agents), "--server", web, env=env))
        server.backend = backend
        yield server


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=20) as c:
        yield c


def start(client: httpx.Client, message: str, slug: str = "support", **body) -> str:
    response = client.post(f"/{slug}/v1/session", json={"message": message, **body})
    assert response.status_code == 201, response.text
    return response.json()["sessionId"]


def read_ndjson(
    client: httpx.Client, url: str, *, until: Callable[[dict], bool] | None = None, count: int | None = None
) -> list[dict]:
    """Read a stream until `until(event)` holds or `count` events arrived, then leave."""
    events: list[dict] = []
    with client.stream("GET", url) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("application/x-ndjson")
        for line in response.iter_lines():
            if not line:
                continue
            events.append(json.loads(line))
            if (until and until(events[-1])) or (count is not None and len(events) >= count):
                break
    return events


def read_sse(client: httpx.Client, url: str, *, headers: dict[str, str] | None = None, count: int | None = None,
             until: Callable[[dict], bool] | None = None) -> list[tuple[str, str, dict]]:
    """Read SSE messages as (id, event, data) until `count` or `until`, then leave."""
    messages: list[tuple[str, str, dict]] = []
    fields: dict[str, str] = {}
    with client.stream("GET", url, headers={"Accept": "text/event-stream", **(headers or {})}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
                continue
            if "data" in fields:
                messages.append((fields["id"], fields["event"], json.loads(fields["data"])))
                if (until and until(messages[-1][2])) or (count is not None and len(messages) >= count):
                    break
            fields = {}
    return messages


def dump(client: httpx.Client, session_id: str, slug: str = "support", start_index: int = 0) -> list[dict]:
    response = client.get(f"/{slug}/v1/session/{session_id}/events", params={"startIndex": start_index})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line]


def is_type(type_: str) -> Callable[[dict], bool]:
    return lambda event: event["type"] == type_


def squeeze(types: list[str]) -> list[str]:
    """Collapse runs of text deltas: how many a reply is split into is not part of the contract."""
    out: list[str] = []
    for t in types:
        if not (out and t == out[-1] and t in ("message.appended", "reasoning.appended")):
            out.append(t)
    return out


def assert_contiguous(events: list[dict], session_id: str, first: int = 0) -> None:
    assert [e["index"] for e in events] == list(range(first, first + len(events)))
    assert {e["sessionId"] for e in events} == {session_id}


def test_a_turn_streams_the_documented_sequence_with_contiguous_indexes(client):
    session_id = start(client, "hello there")
    events = read_ndjson(client, f"/support/v1/session/{session_id}/stream?startIndex=0", until=is_type("session.waiting"))

    assert squeeze([e["type"] for e in events]) == [
        "session.started", "agent.bound", "message.received", "turn.started", "step.started",
        "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    assert_contiguous(events, session_id)
    by_type = {e["type"]: e for e in events}
    assert by_type["message.received"]["data"]["text"] == "hello there"
    deltas = "".join(e["data"]["delta"] for e in events if e["type"] == "message.appended")
    assert deltas == by_type["message.completed"]["data"]["text"] == "You said: hello there"
    usage = by_type["turn.completed"]["data"]["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    # Everything from message.received on belongs to the one turn.
    turn_ids = {e["turnId"] for e in events[2:]}
    assert len(turn_ids) == 1 and None not in turn_ids
    assert {e["turnId"] for e in events[:2]} == {None}


def test_a_tool_turn_adds_the_requested_actions_and_their_results(client):
    session_id = start(client, '/call lookup_order {"order_id": "A100"}')
    events = read_ndjson(client, f"/support/v1/session/{session_id}/stream?startIndex=0", until=is_type("session.waiting"))

    assert squeeze([e["type"] for e in events]) == [
        "session.started", "agent.bound", "message.received", "turn.started",
        "step.started", "step.completed", "actions.requested", "action.result",
        "step.started", "message.appended", "message.completed", "step.completed",
        "turn.completed", "session.waiting",
    ]
    assert_contiguous(events, session_id)
    requested = next(e for e in events if e["type"] == "actions.requested")["data"]["calls"]
    result = next(e for e in events if e["type"] == "action.result")["data"]
    assert [(c["toolName"], c["input"]) for c in requested] == [("lookup_order", {"order_id": "A100"})]
    assert result["callId"] == requested[0]["callId"]
    assert result["output"]["status"] == "delivered" and result["stubbed"] is False
    assert "lookup_order (ok)" in next(e for e in events if e["type"] == "message.completed")["data"]["text"]


def test_a_reader_that_reconnects_mid_turn_gets_exactly_the_events_it_missed(client):
    session_id = start(client, LONG_MESSAGE, slug="slow")
    url = f"/slow/v1/session/{session_id}/stream"
    seen: list[dict] = []
    mid_turn_disconnects = 0
    for _ in range(200):  # bounded: a turn of ~30 events needs about a dozen reconnects
        part = read_ndjson(client, f"{url}?startIndex={len(seen)}", count=3, until=is_type("session.waiting"))
        assert part, "a reconnect got nothing"
        assert part[0]["index"] == len(seen), "gap or repeat at the reconnect"
        seen.extend(part)
        if seen[-1]["type"] == "session.waiting":
            break
        if not any(e["type"] == "turn.completed" for e in dump(client, session_id, "slow", len(seen))):
            mid_turn_disconnects += 1
    else:
        pytest.fail("the turn never reached session.waiting")

    assert_contiguous(seen, session_id)
    assert mid_turn_disconnects >= 3, "the reader should have left and come back while the turn was running"
    assert sum(e["type"] == "message.appended" for e in seen) >= 3
    assert seen == dump(client, session_id, "slow")
    text = next(e for e in seen if e["type"] == "message.completed")["data"]["text"]
    assert text == f"You said: {LONG_MESSAGE}"


def test_sse_carries_ids_and_resumes_from_last_event_id(client):
    session_id = start(client, LONG_MESSAGE, slug="slow")
    url = f"/slow/v1/session/{session_id}/stream"
    first = read_sse(client, url, count=5)
    assert [int(id_) for id_, _, _ in first] == list(range(5))
    assert all(data["index"] == int(id_) and data["type"] == event for id_, event, data in first)

    seen = first
    for _ in range(200):
        part = read_sse(client, url, headers={"Last-Event-ID": seen[-1][0]}, count=4, until=is_type("session.waiting"))
        assert int(part[0][0]) == int(seen[-1][0]) + 1, "Last-Event-ID must resume right after the last event"
        seen += part
        if seen[-1][1] == "session.waiting":
            break
    else:
        pytest.fail("the turn never reached session.waiting")

    assert [int(id_) for id_, _, _ in seen] == list(range(len(seen)))
    assert [data for _, _, data in seen] == dump(client, session_id, "slow")


def test_sse_start_index_wins_over_last_event_id(client):
    session_id = start(client, "ping")
    read_ndjson(client, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))
    messages = read_sse(client, f"/support/v1/session/{session_id}/stream?startIndex=2",
                        headers={"Last-Event-ID": "5"}, count=1)
    assert messages[0][0] == "2" and messages[0][1] == "message.received"


def test_the_events_dump_equals_the_streamed_events(client):
    session_id = start(client, "first\n/call lookup_order {\"order_id\": \"A101\"}")
    streamed = read_ndjson(client, f"/support/v1/session/{session_id}/stream?startIndex=0", until=is_type("session.waiting"))
    assert client.get(f"/support/v1/session/{session_id}").json()["status"] == "waiting"

    assert dump(client, session_id) == streamed
    assert dump(client, session_id, start_index=4) == streamed[4:]
    # A stream opened later replays the same envelopes, byte for byte in meaning.
    assert read_ndjson(client, f"/support/v1/session/{session_id}/stream?startIndex=0", count=len(streamed)) == streamed


def test_a_stream_opened_on_an_idle_session_follows_the_next_turn(client):
    response = client.post("/support/v1/session", json={"message": "one"})
    session_id, token = response.json()["sessionId"], response.json()["continuationToken"]
    first = read_ndjson(client, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))

    # Open the stream at the next index that does not exist yet, then send a follow-up:
    # the reader must wake up on events written by the worker process.
    with client.stream("GET", f"/support/v1/session/{session_id}/stream?startIndex={len(first)}") as stream:
        assert stream.status_code == 200
        follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": "two", "continuationToken": token})
        assert follow.status_code == 202, follow.text
        later = []
        for line in stream.iter_lines():
            if line:
                later.append(json.loads(line))
                if later[-1]["type"] == "session.waiting":
                    break

    assert_contiguous(later, session_id, first=len(first))
    assert squeeze([e["type"] for e in later]) == [
        "message.received", "turn.started", "step.started", "message.appended",
        "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    assert later[0]["data"]["text"] == "two"
    assert first + later == dump(client, session_id)


def test_a_stream_ends_by_itself_when_its_session_is_deleted_mid_turn(client):
    session_id = start(client, "/sleep 60000")
    url = f"/support/v1/session/{session_id}/stream"
    with client.stream("GET", url) as stream:
        lines = stream.iter_lines()
        for line in lines:
            if line and json.loads(line)["type"] == "step.started":
                break
        assert client.delete(f"/support/v1/session/{session_id}").status_code == 204
        # The rest (if the turn's last events won the race with the delete) and then
        # the end of the body; a follower left hanging fails here with a read timeout.
        rest = [json.loads(line) for line in lines if line]
    assert all(e["sessionId"] == session_id for e in rest)
    assert client.get(f"/support/v1/session/{session_id}").status_code == 404



def test_several_readers_outlive_a_quiet_stretch_of_a_turn(server):
    """Nothing is written for seconds mid-turn (a slow model call) while three readers
    follow at once. On Redis their wake-up receives sit in Redis meanwhile: each must
    still see the whole turn, the same as the dump."""
    quiet_ms = 1000 if server.backend == "sqlite" else 6000  # Redis: past redis-py's 5 s read timeout
    with server.client(timeout=20) as client:
        session_id = start(client, f"/sleep {quiet_ms}\nafter the pause")
    results: dict[int, list[dict] | BaseException] = {}

    def follow(n: int) -> None:
        try:
            with server.client(timeout=20) as own:
                results[n] = read_ndjson(own, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))
        except BaseException as exc:  # reported below, with the reader it came from
            results[n] = exc

    readers = [threading.Thread(target=follow, args=(n,), daemon=True) for n in range(3)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(timeout=60)
    assert not any(reader.is_alive() for reader in readers), "a reader never reached session.waiting"
    with server.client(timeout=20) as client:
        expected = dump(client, session_id)
    for n in range(3):
        assert results[n] == expected, f"reader {n}: {results[n]!r}"[:500]
    assert expected[-2]["type"] == "turn.completed"


class RawWebsocket:
    """Just enough of RFC 6455 to read a server's text frames, with no client library."""

    def __init__(self, base_url: str, path: str):
        host, port = base_url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {base_url}\r\n\r\n"
        ).encode())
        self.buffer = b""
        head = self._until(b"\r\n\r\n")
        assert head.split(b"\r\n")[0].split()[1] == b"101", head

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            self._more()
        head, self.buffer = self.buffer.split(marker, 1)
        return head

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buffer += data

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._more()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def frame(self) -> tuple[int, bytes]:
        first, second = self._take(2)
        length = second & 0x7F
        if length == 126:
            length = struct.unpack(">H", self._take(2))[0]
        elif length == 127:
            length = struct.unpack(">Q", self._take(8))[0]
        return first & 0x0F, self._take(length)

    def event(self) -> dict:
        opcode, payload = self.frame()
        while opcode == 9:  # daphne pings idle sockets: answer, or it hangs up
            self.send(10, payload)
            opcode, payload = self.frame()
        assert opcode == 1, f"expected a text frame, got opcode {opcode} {payload!r} (8 is a close)"
        return json.loads(payload)

    def send(self, opcode: int, payload: bytes) -> None:
        """A client frame: short, final and masked, as RFC 6455 requires of clients."""
        assert len(payload) < 126
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def close(self) -> None:
        self.sock.close()


def test_a_websocket_left_idle_still_gets_the_next_turn(server, client):
    """An idle socket's consumer waits on the channel layer; on Redis that wait must
    survive more than the client's 5 s default read timeout, and on the embedded
    default the next turn's events must reach it from the worker process."""
    response = client.post("/support/v1/session", json={"message": "one"})
    session_id, token = response.json()["sessionId"], response.json()["continuationToken"]
    first = read_ndjson(client, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))

    ws = RawWebsocket(server.base_url, f"/support/v1/session/{session_id}/ws?startIndex=0")
    try:
        assert [ws.event() for _ in first] == first
        # Idle, on purpose: on Redis longer than redis-py's default socket timeout (5 s).
        time.sleep(1 if server.backend == "sqlite" else 6)
        follow = client.post(f"/support/v1/session/{session_id}/message", json={"message": "two", "continuationToken": token})
        assert follow.status_code == 202, follow.text
        later = [ws.event()]
        while later[-1]["type"] != "session.waiting":
            later.append(ws.event())
    finally:
        ws.close()
    assert first + later == dump(client, session_id)
    assert later[0]["data"]["text"] == "two"
