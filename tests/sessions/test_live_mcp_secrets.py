"""An agent's secret reaches its MCP server's environment on a running server,
and a changed secret reaches it without a restart: the connection opened with
the old value is replaced by one opened with the new (the server process's pid
changes), in the web process (direct tool calls) and in the worker (turns).
The secret is set in the server's own database (its state root) by another
process (this test's), as `manage.py secrets set` would.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from agents.models import Agent, Secret
from tests.server_database import on_server_database
from tests.support import Server, read_stream_until, run_server

TOKEN = "owner-token-3c1e77"
SERVER = '''\
import os

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("vault")


@server.tool(description="The TOKEN this server process was started with, and its pid.",
             annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> str:
    return f"{os.environ.get('TOKEN', '')} {os.getpid()}"


server.run("stdio")
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    agent = agents / "holder" / "agent"
    (agent / "servers").mkdir(parents=True)
    (agent / "instructions.md").write_text("You hold a token.\n")
    (agent / "servers" / "vault.py").write_text(textwrap.dedent(SERVER))
    (agent / "mcp.json").write_text(json.dumps({"mcpServers": {"vault": {
        "command": "python", "args": ["agent/servers/vault.py"], "env": {"TOKEN": "${NOTES_TOKEN}"},
        "sandbox": False}}}))
    root = tmp_path_factory.mktemp("state")
    with run_server(root, "--agents", str(agents), "--bearer-token", TOKEN) as running:
        yield running


def set_secret(state_root: Path, value: str, db_blocker) -> None:
    with on_server_database(state_root, db_blocker):
        Secret.put(Agent.objects.get(slug="holder"), "NOTES_TOKEN", value, by="test")


def direct(client, server: Server) -> tuple[str, str]:
    response = client.post("/holder/v1/tools/vault__whoami/call", json={"input": {}})
    assert response.status_code == 200, f"{response.text}\n{server.output()[-3000:]}"
    token, pid = response.json()["output"]["result"].split()
    return token, pid


def in_a_turn(client) -> tuple[str, str]:
    created = client.post("/holder/v1/session", json={"message": "/call vault__whoami {}"})
    assert created.status_code == 201, created.text
    events = read_stream_until(client, f"/holder/v1/session/{created.json()['sessionId']}/stream", "session.waiting")
    result = next(e for e in events if e["type"] == "action.result")
    token, pid = result["data"]["output"]["result"].split()
    return token, pid


def test_a_changed_secret_reaches_the_mcp_server_without_a_restart(server: Server, django_db_blocker):
    client = server.client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    unset = client.post("/holder/v1/tools/vault__whoami/call", json={"input": {}})
    assert unset.status_code == 404, unset.text  # NOTES_TOKEN set nowhere: the server is not started

    set_secret(server.state_root, "first-value", django_db_blocker)
    token, pid = direct(client, server)
    assert token == "first-value"
    assert direct(client, server) == (token, pid), "the same values: the same connection"
    turn_token, turn_pid = in_a_turn(client)
    assert turn_token == "first-value"

    set_secret(server.state_root, "second-value", django_db_blocker)
    token, new_pid = direct(client, server)
    assert token == "second-value" and new_pid != pid, "a new connection, with the new value"
    turn_token, new_turn_pid = in_a_turn(client)
    assert turn_token == "second-value" and new_turn_pid != turn_pid
    assert server.process.poll() is None, "the server was never restarted"
