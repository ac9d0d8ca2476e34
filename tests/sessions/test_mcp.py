"""MCP servers' tools in turns, against real servers on the official SDK's
own server class (tests/sessions/mcp_servers/notes_server.py), over stdio
and over streamable HTTP: offered to the model as `<server>__<tool>`, run
through ToolCall rows, gated by approvals, stubbed in dry runs; a server
that dies mid-call, one that does not answer in time and one that cannot
start end the call (or leave the tools unoffered) with a clear error."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from agents.discovery import AgentFolderError, deploy_agent_folder, load_agent_folder
from sessions.mcp.tools import hub
from sessions.models import Event, ToolCall

transactional = pytest.mark.django_db(transaction=True)
SERVER = Path(__file__).parent / "mcp_servers" / "notes_server.py"


def call_line(tool: str, arguments: dict) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def write_agent(root: Path, mcp: dict, agent_py: str | None = None) -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You keep notes.\n")
    (root / "agent" / "mcp.json").write_text(json.dumps({"mcpServers": mcp}))
    if agent_py:
        (root / "agent" / "agent.py").write_text(agent_py)
    return root


@pytest.fixture(autouse=True)
def fresh_connections():
    yield
    hub().close_all()
    hub().connections.clear()
    hub().known_tools.clear()
    hub().last_attempt.clear()


@pytest.fixture
def notes_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "notes.txt"
    monkeypatch.setenv("NOTES_FILE", str(path))
    return path


def stdio_entry(**extra) -> dict:
    # Trusted: these tests are about connections, and the notes file lies outside the agent folder
    # (the sandboxed default is tests/sessions/test_mcp_sandbox.py). The server imports the MCP SDK
    # (about a second of CPU): on a machine loaded twenty deep its start passed the default 15 s to
    # connect, which no test here is about.
    return {"command": "python", "args": [str(SERVER), "stdio"], "env": {"NOTES_FILE": "${NOTES_FILE}"},
            "sandbox": False, "connectTimeout": 90, **extra}


@pytest.fixture
def http_server(tmp_path, notes_file):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port), "Bearer sesame"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.kill()
    proc.wait(10)


def start(client, slug: str, message: str, **fields) -> str:
    response = client.post(f"/{slug}/v1/session", json.dumps({"message": message, **fields}),
                           content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def results(session_id: str) -> list[dict]:
    return list(Event.objects.filter(session_id=session_id, type="action.result").order_by("index")
                .values_list("data", flat=True))


@transactional
def test_a_stdio_servers_tools_run_through_tool_call_rows(local, sync_turns, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))

    session_id = start(local, "notes", call_line("notes__add", {"a": 2, "b": 3}) + "\n"
                       + call_line("notes__note", {"text": "buy milk"}))

    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["notes__add"]["output"] == {"result": 5}
    assert by_tool["notes__note"]["output"] == {"result": "noted: buy milk"}
    assert notes_file.read_text() == "buy milk\n"
    rows = ToolCall.objects.filter(turn__session_id=session_id)
    assert sorted(rows.values_list("tool", "status")) == [("notes__add", "done"), ("notes__note", "done")]


@transactional
def test_the_model_is_offered_the_servers_tools_with_their_schemas(local, sync_turns, tmp_path, notes_file):
    from agents.providers import scripted

    seen = {}
    original = scripted.ScriptedProvider.stream

    def spy(self, request):
        seen.update({t.name: t for t in request.tools})
        return original(self, request)

    scripted.ScriptedProvider.stream = spy
    try:
        deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))
        start(local, "notes", "hello")
    finally:
        scripted.ScriptedProvider.stream = original
    assert {"notes__add", "notes__note", "notes__slow", "notes__die"} <= set(seen)
    assert seen["notes__add"].input_schema["required"] == ["a", "b"]
    assert seen["notes__add"].description == "Add two integers."


@transactional
def test_bad_arguments_come_back_as_the_servers_error(local, sync_turns, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))

    session_id = start(local, "notes", call_line("notes__add", {"a": "x"}))

    [result] = results(session_id)
    assert "output" not in result
    assert "McpToolError" in result["error"] and "validation error" in result["error"]
    assert Event.objects.filter(session_id=session_id, type="turn.completed").exists()


@transactional
def test_a_server_that_dies_mid_call_fails_that_call_and_the_next_call_starts_it_again(
        local, sync_turns, tmp_path, notes_file):
    root = write_agent(tmp_path / "notes", {"notes": stdio_entry()})
    deployment = deploy_agent_folder(root)
    start(local, "notes", call_line("notes__add", {"a": 1, "b": 1}))
    server_pid = _server_pids(deployment.snapshot_dir(), notes_file)
    assert len(server_pid) == 1

    session_id = start(local, "notes", call_line("notes__die", {}))

    [result] = results(session_id)
    assert "output" not in result
    assert "MCP server 'notes' failed during 'die'" in result["error"]
    assert Event.objects.filter(session_id=session_id, type="turn.completed").exists()
    # The server exited by itself: gone once the kernel has finished it (matched by its command line,
    # folder and notes file, not by pid alone, since a long run may hand the pid to another process).
    def still_running() -> set[int]:
        return server_pid & _server_pids(deployment.snapshot_dir(), notes_file, live_only=True)

    deadline = time.monotonic() + 10
    while still_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not still_running()
    again = start(local, "notes", call_line("notes__add", {"a": 20, "b": 22}))
    assert results(again)[0]["output"] == {"result": 42}


@transactional
def test_a_closed_connection_is_never_handed_out_again_while_a_busy_loop_has_not_closed_it_yet(tmp_path, notes_file):
    from sessions.mcp import tools

    loaded = load_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))
    server, cwd = loaded.mcp[0], loaded.root
    hub().connect(server, cwd)
    # The MCP loop busy for a moment, as on a loaded machine: the close below waits its turn there.
    tools._loop.get().call_soon_threadsafe(time.sleep, 1)
    hub().close((str(cwd), server.name))

    assert hub().call(server, cwd, "add", {"a": 20, "b": 22}) == {"result": 42}


def _server_pids(cwd: Path, notes_file: Path, *, live_only: bool = False) -> set[int]:
    """This test's stdio server processes: in its agent's folder, writing to its notes file. The folder
    alone is not enough: the same agent files deploy to the same folder, where an earlier test's server may
    still be closing. `live_only`: not the ones that exited and wait to be reaped."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if live_only and p.status() == psutil.STATUS_ZOMBIE:
                continue
            if str(SERVER) in " ".join(p.cmdline()) and Path(p.cwd()) == cwd.resolve() \
                    and p.environ().get("NOTES_FILE") == str(notes_file):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


@transactional
def test_a_call_that_takes_too_long_ends_at_the_servers_timeout(local, sync_turns, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry(timeout=1)}))

    started = time.monotonic()
    session_id = start(local, "notes", call_line("notes__slow", {"seconds": 20}))

    assert time.monotonic() - started < 10
    [result] = results(session_id)
    assert "output" not in result and "did not answer 'slow' within 1 s" in result["error"]


@transactional
def test_a_server_that_cannot_start_leaves_its_tools_unoffered_and_the_turn_runs(local, sync_turns, tmp_path):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"broken": {"command": "/nonexistent/mcp-server"}}))

    session_id = start(local, "notes", call_line("broken__add", {"a": 1, "b": 2}))

    [result] = results(session_id)
    assert "output" not in result and "unknown tool 'broken__add'" in result["error"]
    assert Event.objects.filter(session_id=session_id, type="turn.completed").exists()


@transactional
def test_a_missing_environment_variable_is_named(local, sync_turns, tmp_path, monkeypatch, notes_file):
    monkeypatch.delenv("NOTES_FILE")
    from agents.discovery import load_agent_folder as load
    from sessions.mcp.tools import McpUnavailable

    loaded = load(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))
    with pytest.raises(McpUnavailable, match="NOTES_FILE is not set: set it as a secret of the agent"):
        hub().connect(loaded.mcp[0], loaded.root)


@transactional
def test_streamable_http_with_a_header_from_the_environment(local, sync_turns, tmp_path, http_server, monkeypatch):
    monkeypatch.setenv("NOTES_TOKEN", "sesame")
    deploy_agent_folder(write_agent(tmp_path / "remote", {
        "remote": {"url": http_server, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}}))

    session_id = start(local, "remote", call_line("remote__add", {"a": 40, "b": 2}))

    assert results(session_id)[0]["output"] == {"result": 42}


@transactional
def test_streamable_http_refused_without_the_header(local, sync_turns, tmp_path, http_server, monkeypatch):
    monkeypatch.setenv("NOTES_TOKEN", "wrong")
    deploy_agent_folder(write_agent(tmp_path / "remote", {
        "remote": {"url": http_server, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}}))

    session_id = start(local, "remote", call_line("remote__add", {"a": 40, "b": 2}))

    assert "unknown tool 'remote__add'" in results(session_id)[0]["error"]


@transactional
def test_an_http_server_that_goes_away_fails_the_call(local, sync_turns, tmp_path, http_server, monkeypatch):
    monkeypatch.setenv("NOTES_TOKEN", "sesame")
    deploy_agent_folder(write_agent(tmp_path / "remote", {
        "remote": {"url": http_server, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}, "timeout": 5}}))
    start(local, "remote", call_line("remote__add", {"a": 1, "b": 1}))

    session_id = start(local, "remote", call_line("remote__die", {}))

    [result] = results(session_id)
    assert "output" not in result and "MCP server 'remote'" in result["error"]


@transactional
def test_approval_per_tool_parks_the_call(local, sync_turns, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry(needsApproval=["note"])}))

    session_id = start(local, "notes", call_line("notes__note", {"text": "gated"}))

    row = ToolCall.objects.get(turn__session_id=session_id)
    assert row.tool == "notes__note" and row.status == "awaiting_approval"
    assert not notes_file.exists()
    approved = local.post(f"/notes/v1/session/{session_id}/approvals/{row.call_id}",
                          json.dumps({"decision": "approve"}), content_type="application/json")
    assert approved.status_code in (200, 202), approved.content
    assert notes_file.read_text() == "gated\n"


@transactional
def test_dry_run_stubs_the_servers_write_tools_and_runs_its_read_only_ones(local, sync_turns, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))

    session_id = start(local, "notes", call_line("notes__note", {"text": "x"}) + "\n"
                       + call_line("notes__add", {"a": 1, "b": 2}), dryRun=True)

    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["notes__note"].get("stubbed") is True
    assert by_tool["notes__add"]["output"] == {"result": 3}
    assert not notes_file.exists()


def test_declaration_problems_name_the_file_and_the_fix(tmp_path):
    root = write_agent(tmp_path / "bad", {"a b": {"command": "x"}, "both": {"command": "x", "url": "http://h"},
                                          "odd": {"command": "x", "port": 3}, "slow": {"url": "ftp://h", "timeout": 0}})
    with pytest.raises(AgentFolderError) as raised:
        load_agent_folder(root)
    text = str(raised.value)
    assert "agent/mcp.json: server name 'a b'" in text
    assert "give exactly one of command (stdio) or url" in text
    assert "unknown key(s) port" in text
    assert "url must start with http:// or https://" in text and "timeout is a number of seconds" in text


def test_agent_py_declares_servers_and_the_manifest_keeps_no_secret(tmp_path):
    root = write_agent(tmp_path / "py", {}, agent_py=(
        "from agents.sdk import Agent, mcp_http\n"
        "agent = Agent(mcp=[mcp_http('search', 'https://mcp.example.com/mcp', headers={'Authorization': 'Bearer ${T}'},"
        " needs_approval=True)])\n"))
    loaded = load_agent_folder(root)
    [server] = loaded.manifest()["mcp"]
    assert server == {"name": "search", "transport": "http", "url": "https://mcp.example.com/mcp", "envKeys": [],
                      "headerKeys": ["Authorization"], "needsApproval": True, "timeout": 30.0,
                      "oauth": False, "advertise": True}


@transactional
def test_a_direct_call_reaches_the_servers_tool(local, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}))

    response = local.post("/notes/v1/tools/notes__add/call", json.dumps({"input": {"a": 4, "b": 5}}),
                          content_type="application/json")
    missing = local.post("/notes/v1/tools/notes__nothing/call", json.dumps({"input": {}}),
                         content_type="application/json")

    assert response.status_code == 200, response.content
    assert response.json()["output"] == {"result": 9}
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "tool_not_found"


@transactional
def test_info_lists_the_servers_and_their_tools_without_secrets(local, tmp_path, notes_file, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "do-not-show")
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry(env={"NOTES_FILE": "${NOTES_FILE}",
                                                                                   "TOKEN": "${SECRET_TOKEN}"})}))

    response = local.get("/notes/v1/info")

    assert response.status_code == 200
    body = response.json()
    offered = {t["name"]: t for t in body["offeredTools"]}
    assert offered["notes__add"]["family"] == "mcp"
    assert offered["notes__add"]["source"] == {"kind": "mcp", "server": "notes"}
    assert offered["notes__add"]["inputSchema"]["required"] == ["a", "b"]
    assert offered["notes__note"]["effect"] == "write" and offered["notes__add"]["effect"] == "read"
    assert body["mcp"] == [{"name": "notes", "transport": "stdio", "command": "python", "args": [str(SERVER), "stdio"],
                            "envKeys": ["NOTES_FILE", "TOKEN"], "headerKeys": [], "needsApproval": False,
                            "timeout": 30.0, "oauth": False, "advertise": True, "sandbox": False,
                            "network": False, "paths": []}]
    assert "do-not-show" not in response.content.decode() and "${SECRET_TOKEN}" not in response.content.decode()
