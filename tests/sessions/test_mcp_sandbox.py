"""A stdio MCP server declared by an agent runs in the workspace sandbox unless the declaration trusts it.

The server here is the tests' real notes server, copied into the agent folder
(the only folder a sandboxed server sees, read-only), asked to do what a
hostile server would: read the server's environment, the database, a file
outside, write outside, and open a connection.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import socket
from pathlib import Path
from typing import Iterator

import pytest
from django.conf import settings

from agents.discovery import deploy_agent_folder
from agents.workspaces import sandbox
from sessions.mcp.tools import hub
from tests.sessions.test_mcp import SERVER, transactional, write_agent

SECRET = "sk-mcp-sandbox-secret-0451"


@pytest.fixture(autouse=True)
def fresh_connections():
    yield
    hub().close_all()
    hub().connections.clear()
    hub().known_tools.clear()  # the same folder deploys to the same path in every test
    hub().last_attempt.clear()
    hub().errors.clear()


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def deploy_notes(tmp_path: Path, **declared) -> Path:
    root = write_agent(tmp_path / "notes", {"notes": {"command": "python", "args": ["agent/servers/notes_server.py", "stdio"],
                                                      **declared}})
    (root / "agent" / "servers").mkdir()
    shutil.copy(SERVER, root / "agent" / "servers" / "notes_server.py")
    deploy_agent_folder(root)
    return root


def call(local, tool: str, arguments: dict) -> dict:
    response = local.post(f"/notes/v1/tools/notes__{tool}/call", json.dumps({"input": arguments}),
                          content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def output(local, tool: str, **arguments) -> str:
    return call(local, tool, arguments)["output"]["result"]


@transactional
def test_a_sandboxed_server_runs_its_tools(local, tmp_path, secret_env):
    deploy_notes(tmp_path)

    assert call(local, "add", {"a": 2, "b": 3})["output"] == {"result": 5}


@transactional
def test_a_trusted_server_runs_as_the_servers_user(local, tmp_path, secret_env):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside-marker-77")
    deploy_notes(tmp_path, sandbox=False)

    assert output(local, "peek", path=str(outside)) == "outside-marker-77"


@transactional
def test_a_sandboxed_server_cannot_read_the_servers_secrets_or_files(local, tmp_path, secret_env):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside-marker-77")
    deploy_notes(tmp_path)

    for path in ("/proc/1/environ", "/proc/self/environ", "/proc/self/../1/environ"):
        assert SECRET not in output(local, "peek", path=path)
    assert "outside-marker-77" not in output(local, "peek", path=str(outside))
    assert output(local, "peek", path=str(settings.DATABASES["default"]["NAME"])).startswith("refused")


@transactional
def test_a_sandboxed_server_writes_nowhere_on_the_host(local, tmp_path, secret_env):
    root = deploy_notes(tmp_path)

    for target in (tmp_path / "pwn", root / "agent" / "pwn", Path(settings.STATE_ROOT) / "pwn"):
        assert output(local, "poke", path=str(target)).startswith("refused")
        assert not target.exists()


@contextlib.contextmanager
def listening() -> Iterator[int]:
    """A port on this host's loopback that accepts connections while the block runs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@transactional
def test_a_sandboxed_server_has_no_network_unless_declared(local, tmp_path, secret_env):
    with listening() as port:
        deploy_notes(tmp_path)

        assert output(local, "reach", host="127.0.0.1", port=port).startswith("refused")


@transactional
def test_a_declared_network_reaches_out(local, tmp_path, secret_env):
    with listening() as port:
        deploy_notes(tmp_path, network=True)

        assert output(local, "reach", host="127.0.0.1", port=port) == "connected"


@transactional
def test_info_says_whether_a_server_is_sandboxed(local, tmp_path, secret_env):
    deploy_notes(tmp_path)

    (server,) = local.get("/notes/v1/info").json()["mcp"]
    assert (server["sandbox"], server["network"]) == (True, False)


@transactional
def test_without_a_working_sandbox_a_sandboxed_server_is_not_started(local, tmp_path, secret_env, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # no bwrap to be found: the sandbox cannot start
    sandbox._probe.cache_clear()
    try:
        deploy_notes(tmp_path)
        offered = {t["name"] for t in local.get("/notes/v1/info").json()["offeredTools"]}
    finally:
        sandbox._probe.cache_clear()

    assert "notes__add" not in offered
