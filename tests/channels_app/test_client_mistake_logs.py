"""What an unauthenticated caller can make the server log: one line at WARNING or INFO, never a traceback.

A real web process under uvicorn (the production server) with JSON logs: a Host header it does not
serve, and a websocket client that hangs up while its session's history is still being sent.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from typing import Iterator

import pytest

from tests.support import Server, run_server

ENV = {"AGENTSITE_LOG_FORMAT": "json", "AGENTSITE_LOG_LEVEL": "INFO", "AGENTSITE_ALLOWED_HOSTS": "127.0.0.1"}
# Enough history that replaying it outlasts every buffer between the server and a client that reads nothing.
TURNS, MESSAGE_CHARS = 24, 100_000


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("mistakes")
    agent = root / "agents" / "echo" / "agent"
    agent.mkdir(parents=True)
    (agent / "instructions.md").write_text("You repeat what you are told.\n")
    (agent / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    with run_server(root / "state", "--server", "uvicorn", "--no-examples", "--no-schedules",
                    "--agents", str(root / "agents"), env=ENV) as server:
        yield server


def log_lines(server: Server) -> list[dict]:
    return [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]


def wait_for_line(server: Server, logger: str, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := [line for line in log_lines(server) if line["logger"] == logger]:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no line of {logger} in:\n{server.output()[-4000:]}")


def assert_no_traceback(server: Server) -> None:
    output = server.output()
    assert "Traceback" not in output, output[-4000:]
    assert not [line for line in log_lines(server) if line["level"] in ("ERROR", "CRITICAL") or "exception" in line]


def test_a_host_header_the_server_does_not_serve_is_one_warning_line(server):
    with server.client() as client:
        assert client.get("/healthz", headers={"Host": "evil.example"}).status_code == 400
        assert client.get("/v1/agents", headers={"Host": "evil.example:1"}).status_code == 400

    lines = wait_for_line(server, "django.security.DisallowedHost")
    assert len(lines) == 2 and {line["level"] for line in lines} == {"WARNING"}
    assert "Invalid HTTP_HOST header: 'evil.example'" in lines[0]["message"]
    assert_no_traceback(server)


def test_a_websocket_client_hanging_up_during_the_replay_is_one_info_line(server):
    with server.client(timeout=60) as client:
        created = client.post("/echo/v1/session", json={"message": "a" * MESSAGE_CHARS})
        assert created.status_code == 201, created.text
        session_id, token = created.json()["sessionId"], created.json()["continuationToken"]
        for _ in range(TURNS - 1):
            wait_for_waiting(client, session_id)
            sent = client.post(f"/echo/v1/session/{session_id}/message",
                               json={"message": "b" * MESSAGE_CHARS, "continuationToken": token})
            assert sent.status_code in (200, 202), sent.text
            token = sent.json().get("continuationToken", token)
        wait_for_waiting(client, session_id)

    hang_up_during_replay(server, f"/echo/v1/session/{session_id}/ws?startIndex=0")

    [line] = wait_for_line(server, "channels_app.consumers")
    assert line["level"] == "INFO" and "the client hung up" in line["message"]
    assert_no_traceback(server)


def wait_for_waiting(client, session_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.get(f"/echo/v1/session/{session_id}").json()["status"] != "waiting":
        assert time.monotonic() < deadline, "the turn never finished"
        time.sleep(0.1)


def hang_up_during_replay(server: Server, path: str) -> None:
    """Open the websocket with a small receive window, read the first bytes of its first frame, and
    reset the connection while the server is still sending."""
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    data = b""
    while len(data.partition(b"\r\n\r\n")[2]) < 2:  # the handshake, then the replay's first bytes
        data += sock.recv(4096)
    assert data.split()[1] == b"101", data[:200]
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    sock.close()
