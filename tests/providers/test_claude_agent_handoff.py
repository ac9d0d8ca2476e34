"""The reviewed handoff between agentsite's loop (`anthropic:`) and the Claude Agent SDK's runtime
(`claude-agent:`), both ways, against one loopback Messages API (the runtime is the real one)."""
from __future__ import annotations

import json

import pytest

from sessions.handoff import perform, review
from sessions.handoff.runtimes import across_runtimes
from sessions.models import Handoff
from sessions.turn.admission import AdmissionError
from tests.providers.loopback import Reply, an_text
from tests.sessions.handoff_support import thinking_session_on
from tests.sessions.test_handoff import FAILING, fresh, follow_up, handoff_events

pytest.importorskip("claude_agent_sdk", reason="the optional runtime: pip install -r requirements-claude-agent.txt")

pytestmark = pytest.mark.usefixtures("no_runtime_child_kept")

OWN = "anthropic:claude-sonnet-4-5"
RUNTIME = "claude-agent:claude-sonnet-4-5"
transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_session(local, sync_turns, tmp_path, anthropic_server):
    """A session on agentsite's loop whose conversation holds signed thinking and a call of the agent's tool."""
    return thinking_session_on(local, tmp_path, anthropic_server, [OWN, RUNTIME])


@transactional
def test_a_session_moves_to_the_runtime_and_back_with_its_whole_conversation(local, own_session, anthropic_server):
    session, token = own_session
    reviewed = review(session, RUNTIME)
    assert reviewed["refusal"] is None and reviewed["carriesOver"]["toolCalls"] == 1
    assert [item["kind"] for item in reviewed["lost"]] == ["thinking", "cache"]
    assert [item["kind"] for item in reviewed["transformed"]] == ["toolNames"]
    assert "mcp__agent__<tool>" in reviewed["transformed"][0]["detail"]

    anthropic_server.replies.append(Reply(events=an_text("OK")))  # the confirming call
    assert perform(session, RUNTIME, reviewed["reviewId"]).status == "completed"
    confirm = anthropic_server.requests[-1]["body"]
    assert confirm["max_tokens"] == 1
    assert [t["name"] for t in confirm["tools"]] == ["mcp__agent__lookup_order"]
    assert confirm["messages"][1]["content"][0]["name"] == "mcp__agent__lookup_order"
    assert fresh(session).model == RUNTIME

    anthropic_server.replies.append(Reply(events=an_text("A101 ships tomorrow.")))
    token = follow_up(local, session, token, "and A101?")
    sent = anthropic_server.requests[-1]["body"]  # the runtime's call: the history as its own transcript
    blocks = [(m["role"], b["type"], b.get("name") or b.get("text", "")[:30]) for m in sent["messages"]
              for b in (m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}])
              if "<system-reminder>" not in b.get("text", "")]
    assert ("assistant", "tool_use", "mcp__agent__lookup_order") in blocks
    assert ("user", "tool_result", "") in blocks and ("assistant", "text", "A100 is on its way.") in blocks
    assert not any(kind == "thinking" for _, kind, _ in blocks)  # signed by the other model id: dropped
    assert blocks[-1] == ("user", "text", "and A101?")
    after = fresh(session)
    assert after.conversation[-1] == {"role": "assistant", "content": "A101 ships tomorrow."}

    back = review(after, OWN)
    assert back["refusal"] is None and [item["kind"] for item in back["transformed"]] == []
    anthropic_server.replies.extend([Reply(events=an_text("OK")), Reply(events=an_text("Back on the loop."))])
    assert perform(after, OWN, back["reviewId"]).status == "completed"
    follow_up(local, after, token, "still there?")
    sent = anthropic_server.requests[-1]["body"]
    assert sent["messages"][1]["content"][-1]["name"] == "lookup_order"  # the agent's name again
    assert fresh(session).model == OWN and [e["status"] for e in handoff_events(session)] == ["completed"] * 2


@transactional
def test_a_runtime_that_refuses_the_confirming_call_leaves_the_session_on_the_loop(local, own_session,
                                                                                   anthropic_server):
    session, _ = own_session
    before = list(session.conversation)
    anthropic_server.replies.append(FAILING)
    with pytest.raises(AdmissionError) as refused:
        perform(session, RUNTIME, review(session, RUNTIME)["reviewId"])
    assert (refused.value.status, refused.value.code) == (502, "handoff_failed")
    after = fresh(session)
    assert after.model == OWN and after.conversation == before
    assert Handoff.objects.get(session=session).status == "failed"


def test_the_runtimes_own_tool_calls_are_named_lost_when_moving_to_the_loop():
    conversation = [
        {"role": "user", "content": "tidy up"},
        {"role": "assistant", "content": "", "toolCalls": [
            {"id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            {"id": "toolu_2", "name": "lookup_order", "input": {"order_id": "A100"}},
            {"id": "toolu_3", "name": "Bash", "input": {"command": "pwd"}}]},
    ]
    lost, transformed = across_runtimes(conversation, RUNTIME, OWN)
    assert [(item["kind"], item["count"]) for item in lost] == [("runtimeTools", 2)]
    assert "Bash" in lost[0]["detail"] and "agentsite's loop" in lost[0]["detail"] and transformed == []
    lost, transformed = across_runtimes(conversation, OWN, RUNTIME)
    assert lost == [] and [(item["kind"], item["count"]) for item in transformed] == [("toolNames", 1)]
    assert across_runtimes(conversation, OWN, "anthropic:claude-other") == ([], [])
    assert json.dumps(across_runtimes([], RUNTIME, OWN)) == "[[], []]"
