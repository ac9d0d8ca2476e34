"""The agent's other tools on the Claude Agent SDK's runtime: an MCP server's tools (run, and
stubbed in a dry run) and the messaging tools of an agent with peers, each called by the runtime
through the in-process MCP server that offers it the agent's tools."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.mcp.tools import hub
from sessions.models import Session, Turn
from tests.providers.loopback import Reply, an_text, an_tool_uses
from tests.sessions.test_mcp import stdio_entry, write_agent

pytest.importorskip("claude_agent_sdk", reason="the optional runtime: pip install -r requirements-claude-agent.txt")

pytestmark = [pytest.mark.usefixtures("no_runtime_child_kept"), pytest.mark.django_db(transaction=True)]

MODEL = "claude-agent:claude-sonnet-4-5"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def notes_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "notes.txt"
    monkeypatch.setenv("NOTES_FILE", str(path))
    yield path
    hub().close_all()
    hub().connections.clear()
    hub().known_tools.clear()
    hub().last_attempt.clear()


def results(session_id: str) -> dict[str, dict]:
    return {e["data"]["toolName"]: e["data"] for e in read_events(session_id) if e["type"] == "action.result"}


def open_session(client, slug: str, message: str, **options) -> str:
    response = client.post(f"/{slug}/v1/session", json.dumps({"message": message, **options}),
                           content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def test_an_mcp_servers_tools_run_through_the_runtime_and_a_dry_run_stubs_its_write_tool(
        local, anthropic_server, sync_turns, tmp_path, notes_file):
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": stdio_entry()}, agent_py=(
        f"from agents.sdk import Agent\nagent = Agent(model={MODEL!r}, description='notes', tools=[])\n")))
    calls = [("toolu_note", "mcp__agent__notes__note", {"text": "from the runtime"}),
             ("toolu_add", "mcp__agent__notes__add", {"a": 2, "b": 3})]
    anthropic_server.replies.extend([Reply(events=an_tool_uses(calls)), Reply(events=an_text("Noted.")),
                                     Reply(events=an_tool_uses(calls)), Reply(events=an_text("Noted, as a dry run."))])

    session_id = open_session(local, "notes", "note it")

    by_tool = results(session_id)
    assert by_tool["notes__note"]["stubbed"] is False and "error" not in by_tool["notes__note"]
    assert by_tool["notes__add"]["output"] == {"result": 5}
    assert notes_file.read_text() == "from the runtime\n"
    offered = {t["name"] for t in anthropic_server.requests[0]["body"]["tools"]}
    assert {"mcp__agent__notes__note", "mcp__agent__notes__add"} <= offered
    handed = anthropic_server.requests[1]["body"]["messages"][-1]["content"]
    assert [block["tool_use_id"] for block in handed] == ["toolu_note", "toolu_add"]

    dry = open_session(local, "notes", "note it", dryRun=True)

    by_tool = results(dry)
    assert by_tool["notes__note"]["stubbed"] is True
    assert by_tool["notes__add"]["output"] == {"result": 5}
    assert notes_file.read_text() == "from the runtime\n"  # the stubbed write wrote nothing
    assert Session.objects.get(pk=dry).conversation[-1]["content"] == "Noted, as a dry run."


def test_an_agent_on_the_runtime_messages_its_peer_and_reads_the_answer(local, anthropic_server, sync_turns,
                                                                        tmp_path):
    # The librarian on the scripted model (with a key in the environment its default would be Anthropic's).
    librarian = tmp_path / "librarian"
    shutil.copytree(EXAMPLES / "librarian", librarian, ignore=shutil.ignore_patterns("__pycache__"))
    (librarian / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\nagent = Agent(model='scripted:echo', description='books', tools=[])\n")
    deploy_agent_folder(librarian)
    deploy_agent_folder(write_agent(tmp_path / "asker", {}, agent_py=(
        f"from agents.sdk import Agent\nagent = Agent(model={MODEL!r}, description='asks', peers=['librarian'])\n")))
    ask = "Is Dune available?\n/call find_book " + json.dumps({"title": "Dune"})
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_send", "mcp__agent__send_message", {"to": "librarian", "text": ask})])),
        Reply(events=an_tool_uses([("toolu_read", "mcp__agent__read_notifications", {})])),
        Reply(events=an_text("The librarian says it is on shelf SF-3.")),
    ])

    session_id = open_session(local, "asker", "ask the librarian about Dune")

    by_tool = results(session_id)
    sent = by_tool["send_message"]["output"]
    assert sent["delivered"] is True
    recipient = Session.objects.get(pk=sent["sessionId"])
    assert recipient.agent.slug == "librarian"
    assert Turn.objects.get(session_id=recipient.pk).origin["agent"] == "asker"
    [answer] = by_tool["read_notifications"]["output"]["notifications"]  # the librarian answered inline
    assert answer["from"] == {"agent": "librarian", "sessionId": recipient.pk} and "SF-3" in answer["text"]
    assert Session.objects.get(pk=session_id).conversation[-1]["content"] == "The librarian says it is on shelf SF-3."


def test_the_runtimes_question_parks_the_turn_and_the_answer_is_handed_back(local, anthropic_server, sync_turns,
                                                                            tmp_path):
    deploy_agent_folder(write_agent(tmp_path / "asker", {}, agent_py=(
        f"from agents.sdk import Agent\nagent = Agent(model={MODEL!r}, description='asks', tools=[], "
        "builtins=['ask_question'])\n")))
    asked = {"question": "Which carrier?", "options": ["UPS", "DHL"]}
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_ask", "mcp__agent__ask_question", asked)])),
        Reply(events=an_text("DHL it is.")),
    ])

    session_id = open_session(local, "asker", "ship my order")

    assert Session.objects.get(pk=session_id).status == "awaiting_approval"
    [question] = [e["data"] for e in read_events(session_id) if e["type"] == "action.approval_requested"]
    assert (question["kind"], question["question"], question["options"]) == ("question", "Which carrier?", ["UPS", "DHL"])
    answered = local.post(f"/asker/v1/session/{session_id}/questions/toolu_ask", {"answer": "DHL"},
                          content_type="application/json")
    assert answered.status_code == 200, answered.content

    assert results(session_id)["ask_question"]["output"] == "DHL"
    handed = anthropic_server.requests[-1]["body"]["messages"][-1]["content"][0]
    assert handed["type"] == "tool_result" and handed["tool_use_id"] == "toolu_ask" and not handed.get("is_error")
    assert "DHL" in json.dumps(handed["content"])
    assert Session.objects.get(pk=session_id).conversation[-1]["content"] == "DHL it is."
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.COMPLETED
