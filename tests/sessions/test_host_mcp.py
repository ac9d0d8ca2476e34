"""Host-only MCP servers: a server declared `"advertise": false` is never offered
to the model (not in a turn's tools, not callable by name, no direct route, not
in /info's offered tools), and the agent's own tools reach it through
`ctx.host.mcp.call`, under the dry-run and approval rules of sessions.host.mcp.
The server is the tests' real notes server (tests/sessions/mcp_servers).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from agents.mcp import McpNotFound, McpUnavailable
from agents.models import Agent, Secret
from sessions.host.mcp import DRY_RUN_NOTE, Mcp
from sessions.mcp.tools import hub
from sessions.models import ToolCall
from tests.sessions.test_mcp import call_line, results, start, stdio_entry, transactional, write_agent

CALLER = '''\
from pydantic import BaseModel
from agents.sdk import McpApprovalRequired, tool


class Input(BaseModel):
    arguments: dict = {{}}


# Declared "read" so that a dry run reaches its code: the MCP tool it calls is the write.
@tool(description="Call {remote} of the host-only server.", effect="{effect}"{extra})
def {name}(input: Input, ctx):
    try:
        return {{"got": ctx.host.mcp.call("hidden", "{remote}", input.arguments)}}
    except McpApprovalRequired as exc:
        return {{"refused": str(exc)}}
'''

LISTER = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    pass


@tool(description="List the host-only server's tools.", effect="read")
def list_hidden(input: Input, ctx):
    return ctx.host.mcp.tools("hidden")
'''


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


@pytest.fixture
def clerk(tmp_path, notes_file) -> Path:
    """The `clerk` agent: server `hidden` is host-only and gates `note`; its tools call it."""
    root = write_agent(tmp_path / "clerk", {"hidden": stdio_entry(advertise=False, needsApproval=["note"])})
    tools = root / "agent" / "tools"
    tools.mkdir()
    (tools / "tally.py").write_text(CALLER.format(name="tally", remote="add", effect="read", extra=""))
    (tools / "jot.py").write_text(CALLER.format(name="jot", remote="note", effect="read", extra=""))
    (tools / "jot_approved.py").write_text(CALLER.format(name="jot_approved", remote="note", effect="write",
                                                         extra=", needs_approval=True"))
    (tools / "list_hidden.py").write_text(LISTER)
    deploy_agent_folder(root)
    return root


@transactional
def test_a_tool_calls_the_host_only_server_and_the_model_is_never_offered_it(local, sync_turns, clerk):
    from agents.providers import scripted

    offered: list[set[str]] = []
    original = scripted.ScriptedProvider.stream

    def spy(self, request):
        offered.append({t.name for t in request.tools})
        return original(self, request)

    scripted.ScriptedProvider.stream = spy
    try:
        session_id = start(local, "clerk", call_line("tally", {"arguments": {"a": 2, "b": 40}}) + "\n"
                           + call_line("hidden__add", {"a": 1, "b": 1}))
    finally:
        scripted.ScriptedProvider.stream = original

    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["tally"]["output"] == {"got": {"result": 42}}
    assert "unknown tool 'hidden__add'" in by_tool["hidden__add"]["error"]
    assert offered and all("tally" in names for names in offered)
    assert not any(name.startswith("hidden__") for names in offered for name in names)


@transactional
def test_the_host_only_server_has_no_direct_route_and_info_marks_it(local, clerk):
    direct = local.post("/clerk/v1/tools/hidden__add/call", json.dumps({"input": {"a": 1, "b": 2}}),
                        content_type="application/json")
    assert direct.status_code == 404 and direct.json()["error"]["code"] == "tool_not_found"

    info = local.get("/clerk/v1/info").json()
    assert not [t for t in info["offeredTools"] if t["name"].startswith("hidden__")]
    assert "tally" in {t["name"] for t in info["offeredTools"]}
    [server] = info["mcp"]
    assert server["name"] == "hidden" and server["advertise"] is False

    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content.decode()
    assert "hidden__" not in document


@transactional
def test_a_direct_call_of_the_calling_tool_reaches_the_server(local, clerk):
    response = local.post("/clerk/v1/tools/tally/call", json.dumps({"input": {"arguments": {"a": 4, "b": 5}}}),
                          content_type="application/json")
    listed = local.post("/clerk/v1/tools/list_hidden/call", json.dumps({"input": {}}),
                        content_type="application/json")

    assert response.status_code == 200, response.content
    assert response.json()["output"] == {"got": {"result": 9}}
    assert {"add", "note"} <= set(listed.json()["output"])


@transactional
def test_in_a_dry_run_a_write_tool_of_the_server_is_stubbed_and_a_read_only_one_runs(
        local, sync_turns, clerk, notes_file):
    session_id = start(local, "clerk", call_line("jot", {"arguments": {"text": "x"}}) + "\n"
                       + call_line("tally", {"arguments": {"a": 1, "b": 2}}), dryRun=True)

    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["jot"]["output"] == {"got": {"stubbed": True, "output": DRY_RUN_NOTE}}
    assert by_tool["tally"]["output"] == {"got": {"result": 3}}
    assert not notes_file.exists()


@transactional
def test_a_gated_server_tool_is_refused_unless_the_calling_call_was_approved(local, sync_turns, clerk, notes_file):
    refused_session = start(local, "clerk", call_line("jot", {"arguments": {"text": "not approved"}}))
    [refused] = results(refused_session)
    assert "needs approval" in refused["output"]["refused"]
    assert "needs_approval=True" in refused["output"]["refused"]
    assert not notes_file.exists()

    session_id = start(local, "clerk", call_line("jot_approved", {"arguments": {"text": "approved"}}))
    row = ToolCall.objects.get(turn__session_id=session_id)
    assert row.status == "awaiting_approval"
    decided = local.post(f"/clerk/v1/session/{session_id}/approvals/{row.call_id}",
                         json.dumps({"decision": "approve"}), content_type="application/json")
    assert decided.status_code in (200, 202), decided.content

    [result] = results(session_id)
    assert result["output"] == {"got": {"result": "noted: approved"}}
    assert notes_file.read_text() == "approved\n"


@transactional
def test_unknown_servers_and_tools_are_named_and_an_unavailable_server_raises(clerk, tmp_path, monkeypatch):
    agent = Agent.objects.get(slug="clerk")
    host_mcp = Mcp(agent, None)

    with pytest.raises(McpNotFound, match=r"no MCP server 'nowhere'; its servers: hidden"):
        host_mcp.call("nowhere", "add", {})
    with pytest.raises(McpNotFound, match=r"server 'hidden' has no tool 'subtract'; its tools: add, die, note"):
        host_mcp.call("hidden", "subtract", {})
    with pytest.raises(McpUnavailable, match="failed during 'die'"):
        host_mcp.call("hidden", "die", {})

    monkeypatch.delenv("NOTES_FILE")
    with pytest.raises(McpUnavailable, match="NOTES_FILE is not set"):
        host_mcp.call("hidden", "add", {"a": 1, "b": 1})
    with pytest.raises(TypeError, match="a dict of the tool's input"):
        host_mcp.call("hidden", "add", [1, 1])


@transactional
def test_a_call_reads_the_agents_secrets_outside_a_turn_too(clerk, tmp_path, monkeypatch):
    monkeypatch.delenv("NOTES_FILE")
    agent = Agent.objects.get(slug="clerk")
    Secret.put(agent, "NOTES_FILE", str(tmp_path / "from-secret.txt"), by="test")

    assert Mcp(agent, None).call("hidden", "add", {"a": 2, "b": 2}) == {"result": 4}
