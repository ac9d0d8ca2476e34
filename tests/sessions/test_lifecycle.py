"""The turn lifecycle as callers see it: a parked turn shows as awaiting
approval everywhere, a subagent's tool calls are stored and reported like the
parent's, and a tool meant for the agent's workspace is never run on the server."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder, load_deployment
from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall, Turn
from sessions.eventlog.trajectory import build_trajectory

transactional = pytest.mark.django_db(transaction=True)

COUNT_WORDS = (
    "from pydantic import BaseModel\nfrom agents.sdk import tool\n\n"
    "class Input(BaseModel):\n    text: str\n\n"
    '@tool(description="Count the words of a text.")\n'
    "def count_words(input: Input, ctx) -> int:\n    return len(input.text.split())\n"
)
PAY = (
    "from pydantic import BaseModel\nfrom agents.sdk import tool\n\n"
    "class Input(BaseModel):\n    amount: int\n\n"
    '@tool(description="Send a payment.", effect="write", needs_approval=True)\n'
    "def pay(input: Input, ctx) -> dict:\n    return {'sent': input.amount}\n"
)
FILES = {
    "agent/instructions.md": "You help.\n",
    "agent/agent.py": 'from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n',
    "agent/tools/count_words.py": COUNT_WORDS,
    "agent/tools/pay.py": PAY,
    "agent/subagents/researcher/agent.py": 'from agents.sdk import Agent\nagent = Agent(description="Finds facts.")\n',
    "agent/subagents/researcher/instructions.md": "You research.\n",
}


@pytest.fixture
def helper(db, tmp_path):
    root = tmp_path / "helper"
    for rel, content in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return deploy_agent_folder(root)


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def call_line(tool: str, arguments: dict) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def start(client, message: str) -> str:
    response = post_json(client, "/helper/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


@transactional
def test_a_parked_turn_shows_the_session_awaiting_approval_until_decided(alice, helper, sync_turns):
    session_id = start(alice, call_line("pay", {"amount": 5}))

    assert alice.get(f"/helper/v1/session/{session_id}").json()["status"] == "awaiting_approval"
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.AWAITING_APPROVAL
    assert build_trajectory(read_events(session_id))["status"] == "awaiting_approval"
    assert build_trajectory(read_events(session_id))["turns"][0]["status"] == "awaiting_approval"
    trace = alice.get(f"/playground/helper/session/{session_id}/trace").content.decode()
    assert 'status-awaiting_approval">awaiting_approval' in trace
    page = alice.get(f"/playground/helper/session/{session_id}").content.decode()
    assert 'status-awaiting_approval">awaiting_approval' in page

    [call] = alice.get(f"/helper/v1/session/{session_id}/approvals").json()["approvals"]
    assert post_json(alice, f"/helper/v1/session/{session_id}/approvals/{call['callId']}",
                     {"decision": "approve"}).status_code == 200

    assert alice.get(f"/helper/v1/session/{session_id}").json()["status"] == "waiting"
    assert build_trajectory(read_events(session_id))["status"] == "waiting"


@transactional
def test_a_parked_direct_call_shows_awaiting_approval_then_gives_the_status_back(alice, helper, sync_turns):
    session_id = start(alice, "hello")
    parked = post_json(alice, "/helper/v1/tools/pay/call", {"input": {"amount": 3}, "sessionId": session_id}).json()
    assert parked["status"] == "awaiting_approval"
    assert Session.objects.get(pk=session_id).status == Session.Status.AWAITING_APPROVAL

    assert post_json(alice, f"/helper/v1/session/{session_id}/approvals/{parked['callId']}",
                     {"decision": "deny"}).status_code == 200

    session = Session.objects.get(pk=session_id)
    assert (session.status, session.active_turn_id) == (Session.Status.WAITING, None)


@transactional
def test_a_subagents_tool_calls_are_tool_call_rows_with_their_own_action_events(alice, helper, sync_turns):
    task = call_line("count_words", {"text": "one two three"})
    session_id = start(alice, call_line("delegate", {"subagent": "researcher", "task": task}))

    found = read_events(session_id)
    types = [e["type"] for e in found]
    at = types.index("subagent.called")
    assert types[at - 1:at + 5] == ["actions.requested", "subagent.called", "actions.requested", "action.result",
                                    "subagent.completed", "action.result"]
    parent_requested, _, sub_requested, sub_result, completed, parent_result = (found[at - 1 + i]["data"]
                                                                                for i in range(6))
    assert "subagent" not in parent_requested and "subagent" not in parent_result
    assert sub_requested["subagent"] == sub_result["subagent"] == "researcher"
    [sub_call] = sub_requested["calls"]
    assert sub_call["toolName"] == "count_words" and sub_call["input"] == {"text": "one two three"}
    assert sub_result["callId"] == sub_call["callId"] and sub_result["output"] == 3
    assert completed["reply"] == "Tool results:\ncount_words (ok): 3"
    assert parent_result["output"] == completed["reply"]

    rows = {r.tool: r for r in ToolCall.objects.filter(session_id=session_id)}
    assert set(rows) == {"delegate", "count_words"}
    assert rows["count_words"].call_id == sub_call["callId"]
    assert rows["count_words"].call_id.startswith(rows["delegate"].call_id + "/")
    assert (rows["count_words"].status, rows["count_words"].output) == (ToolCall.Status.DONE, 3)
    assert rows["count_words"].turn_id == rows["delegate"].turn_id
    assert found[-2]["type"] == "turn.completed" and found[-2]["data"]["usage"]["inputTokens"] > 0


@transactional
def test_a_subagent_cannot_park_a_gated_call_and_its_row_says_why(alice, helper, sync_turns):
    task = call_line("pay", {"amount": 9})
    session_id = start(alice, call_line("delegate", {"subagent": "researcher", "task": task}))

    row = ToolCall.objects.get(session_id=session_id, tool="pay")
    assert row.status == ToolCall.Status.FAILED and "needs approval" in row.error
    assert Session.objects.get(pk=session_id).status == Session.Status.WAITING


@pytest.fixture
def agent_tool(helper, monkeypatch):
    """count_words as a tool declaring execution='agent': a script the model runs with shell, not a tool it calls."""
    loaded = load_deployment(helper)
    monkeypatch.setitem(loaded.tools, "count_words", dataclasses.replace(loaded.tools["count_words"],
                                                                         execution="agent"))


@transactional
def test_a_tool_for_the_agents_workspace_fails_closed_in_a_turn(alice, helper, agent_tool, sync_turns):
    session_id = start(alice, call_line("count_words", {"text": "a b"}))

    [result] = [e["data"] for e in read_events(session_id) if e["type"] == "action.result"]
    assert "output" not in result and result["error"].startswith("execution_unavailable: ")
    row = ToolCall.objects.get(session_id=session_id)
    assert row.status == ToolCall.Status.FAILED and row.started_at is None, "it never ran"


@transactional
def test_a_tool_for_the_agents_workspace_fails_closed_when_called_directly(alice, helper, agent_tool):
    response = post_json(alice, "/helper/v1/tools/count_words/call", {"input": {"text": "a b"}})

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "execution_unavailable"


@transactional
def test_the_sessions_usage_totals_add_up_every_turn_a_parked_one_included(alice, helper, sync_turns):
    created = post_json(alice, "/helper/v1/session", {"message": call_line("pay", {"amount": 5})}).json()
    session_id = created["sessionId"]
    [call] = alice.get(f"/helper/v1/session/{session_id}/approvals").json()["approvals"]
    assert post_json(alice, f"/helper/v1/session/{session_id}/approvals/{call['callId']}",
                     {"decision": "approve"}).status_code == 200
    follow_up = {"message": "and now?", "continuationToken": created["continuationToken"]}
    assert post_json(alice, "/helper/v1/session", follow_up).status_code == 202

    ended = [e["data"]["usage"] for e in read_events(session_id) if e["type"] == "turn.completed"]
    assert len(ended) == 2 and all(u["inputTokens"] > 0 for u in ended)
    totals = Session.objects.get(pk=session_id).usage
    assert totals == {k: sum(u[k] for u in ended) for k in ended[0]}
