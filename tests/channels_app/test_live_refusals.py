"""Both refusals against a real `manage.py serve`, on the embedded default
(SQLite) and on the scale-out configuration (PostgreSQL + Redis):

- an approval-gated tool called directly is refused without a session, and
  bound to one it parks until approved, then runs once in a worker process;
- a page on another site cannot stop a session or open its websocket on the
  loopback default.
"""
from __future__ import annotations

import base64
import contextlib
import os
import socket
import struct
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.support import Server, backend_env, read_stream_until, run_server

EVIL = "http://evil.example"

GATED_TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    account: str


@tool(description="Close an account.", effect="write", needs_approval=True)
def close_account(input: Input, ctx) -> dict:
    with open({path!r}, "a") as f:
        f.write(input.account + "\\n")
    return {{"closed": input.account}}
'''


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    ledger = tmp_path_factory.mktemp("ledger") / "ledger.txt"
    tools = agents / "desk" / "agent" / "tools"
    tools.mkdir(parents=True)
    (agents / "desk" / "agent" / "instructions.md").write_text("You manage accounts.\n")
    (tools / "close_account.py").write_text(GATED_TOOL.format(path=str(ledger)))
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param, migrated=True)
        root = tmp_path_factory.mktemp(f"state-{request.param.replace('+', '-')}")
        server = stack.enter_context(run_server(root, "--agents", str(agents), env=env))
        server.ledger = ledger
        yield server


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=20) as c:
        yield c


def runs(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def start(client: httpx.Client, slug: str, message: str) -> str:
    response = client.post(f"/{slug}/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    return response.json()["sessionId"]


def websocket_close_code(base_url: str, path: str, origin: str) -> int:
    """Open a websocket with `origin` and return the code of the close frame the server sends."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall((
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin}\r\n\r\n"
        ).encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(4096)
        head, rest = data.split(b"\r\n\r\n", 1)
        assert head.split()[1] == b"101", head
        while len(rest) < 4:
            rest += sock.recv(4096)
        assert rest[0] & 0x0F == 8, f"expected a close frame, got {rest!r}"
        return struct.unpack(">H", rest[2:4])[0]


def test_a_gated_tool_is_refused_directly_and_runs_once_after_approval(server, client):
    refused = client.post("/desk/v1/tools/close_account/call", json={"input": {"account": "acc-1"}})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "approval_required"
    example = client.post("/support/v1/tools/cancel_order/call", json={"input": {"order_id": "A102"}})
    assert example.status_code == 403 and example.json()["error"]["code"] == "approval_required"

    session_id = start(client, "desk", "hello")
    stream = f"/desk/v1/session/{session_id}/stream?startIndex=0"
    read_stream_until(client, stream, "session.waiting")
    parked = client.post("/desk/v1/tools/close_account/call", json={"input": {"account": "acc-2"}, "sessionId": session_id})
    assert parked.status_code == 202, parked.text
    assert parked.json()["status"] == "awaiting_approval"
    call_id = parked.json()["callId"]
    assert runs(server.ledger) == []

    approved = client.post(f"/desk/v1/session/{session_id}/approvals/{call_id}", json={"decision": "approve"})
    assert approved.status_code == 200, approved.text

    # The worker process runs it: its result arrives on the stream.
    events = read_stream_until(client, stream, "action.result")
    result = events[-1]["data"]
    assert result["callId"] == call_id and result["output"] == {"closed": "acc-2"}
    assert runs(server.ledger) == ["acc-2"]
    again = client.post(f"/desk/v1/session/{session_id}/approvals/{call_id}", json={"decision": "approve"})
    assert again.status_code == 409
    assert client.get(f"/desk/v1/session/{session_id}").json()["activeTurnId"] is None
    assert runs(server.ledger) == ["acc-2"]


def test_a_foreign_page_cannot_stop_a_session_or_open_its_websocket(server, client):
    session_id = start(client, "support", "/sleep 20000")
    stop = f"/support/v1/session/{session_id}/stop"

    from_evil = client.post(stop, content="", headers={"content-type": "text/plain", "origin": EVIL})
    assert from_evil.status_code == 403 and from_evil.json()["error"]["code"] == "foreign_origin"
    by_referer = client.post(stop, content="", headers={"content-type": "text/plain", "referer": f"{EVIL}/x.html"})
    assert by_referer.status_code == 403 and by_referer.json()["error"]["code"] == "foreign_origin"
    assert client.get(f"/support/v1/session/{session_id}").json()["status"] == "running"

    ws = f"/support/v1/session/{session_id}/ws?startIndex=0"
    assert websocket_close_code(server.base_url, ws, EVIL) == 4403

    # The page's own origin and origin-less callers still can.
    own = client.post(stop, json={}, headers={"origin": server.base_url})
    assert own.status_code == 202, own.text
    failed = read_stream_until(client, f"/support/v1/session/{session_id}/stream?startIndex=0", "turn.failed")
    assert failed[-1]["data"]["error"] == "turn interrupted"
