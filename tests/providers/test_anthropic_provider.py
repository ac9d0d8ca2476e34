"""The Anthropic provider, driven by the real `anthropic` client against a
loopback server that speaks the Messages streaming protocol."""
from __future__ import annotations

import pytest

from sessions.models import Event
from tests.providers.conftest import event_types, start
from tests.providers.loopback import Reply, an_text, an_tool_uses

TWO_CALLS = [("toolu_a", "lookup_order", {"order_id": "A100"}), ("toolu_b", "lookup_order", {"order_id": "A101"})]


@pytest.mark.django_db(transaction=True)
def test_a_two_tool_turn_streams_the_same_events_as_the_scripted_model(local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model("anthropic:claude-test")
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses(TWO_CALLS, input_tokens=150, output_tokens=40)),
        Reply(events=an_text("Both orders are on their way.", input_tokens=220, output_tokens=11)),
    ])
    remote = start(local, "remote", "where are A100 and A101?")

    agent_on_model("scripted:echo", slug="offline")
    offline = start(local, "offline", '/call lookup_order {"order_id": "A100"}\n/call lookup_order {"order_id": "A101"}')

    assert event_types(remote) == event_types(offline)
    results = Event.objects.filter(session_id=remote, type="action.result").order_by("index")
    assert [r.data["callId"] for r in results] == ["toolu_a", "toolu_b"]
    usage = Event.objects.get(session_id=remote, type="turn.completed").data["usage"]
    # claude-test is in no price table: its calls' cost is unknown, not free.
    assert usage == {"inputTokens": 370, "outputTokens": 51, "cacheReadTokens": 0, "cacheWriteTokens": 0,
                     "costUsd": None, "unpricedCalls": 2}

    second = anthropic_server.requests[1]["body"]
    assert second["messages"][-1]["role"] == "user"
    assert [b["tool_use_id"] for b in second["messages"][-1]["content"]] == ["toolu_a", "toolu_b"]
    assert [b["type"] for b in second["messages"][-2]["content"]] == ["tool_use", "tool_use"]
    headers = anthropic_server.requests[0]["headers"]
    assert "sk-ant-test" in headers.get("x-api-key", headers.get("authorization", ""))


@pytest.mark.django_db(transaction=True)
def test_thinking_streams_as_reasoning_and_is_handed_back_with_its_signature(local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model("anthropic:claude-test", {"thinking_budget": 1024})
    anthropic_server.replies.extend([
        Reply(events=an_text("", thinking="Let me look it up.")[:-3] + an_tool_uses([TWO_CALLS[0]])[1:]),
        Reply(events=an_text("Delivered.")),
    ])
    session_id = start(local, "remote", "A100?")
    assert Event.objects.get(session_id=session_id, type="reasoning.completed").data["text"] == "Let me look it up."
    first, second = (r["body"] for r in anthropic_server.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    handed_back = second["messages"][-2]["content"][0]
    assert handed_back == {"type": "thinking", "thinking": "Let me look it up.", "signature": "sig-1"}


@pytest.mark.django_db(transaction=True)
def test_cache_tokens_are_reported_and_priced(local, agent_on_model, anthropic_server, sync_turns):
    from tests.providers.loopback import an_end, an_start

    agent_on_model("anthropic:claude-sonnet-4-5")
    events = [an_start(30, cache_read=500, cache_write=70),
              {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
              {"type": "content_block_stop", "index": 0}] + an_end(3, "end_turn")
    anthropic_server.replies.append(Reply(events=events))
    session_id = start(local, "remote", "hi")
    usage = Event.objects.get(session_id=session_id, type="turn.completed").data["usage"]
    # $3 in, $15 out, $0.30 cache read, $3.75 cache write a million tokens (the pinned genai-prices table)
    assert usage == {"inputTokens": 30, "outputTokens": 3, "cacheReadTokens": 500, "cacheWriteTokens": 70,
                     "costUsd": (30 * 3 + 3 * 15 + 500 * 0.30 + 70 * 3.75) / 1e6}


@pytest.mark.django_db(transaction=True)
def test_an_overloaded_model_is_retried(local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model("anthropic:claude-test")
    anthropic_server.replies.extend([
        Reply(529, headers={"retry-after": "0.1"}, body={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        Reply(events=an_text("fine now")),
    ])
    session_id = start(local, "remote", "hi")
    assert len(anthropic_server.requests) == 2
    assert Event.objects.get(session_id=session_id, type="message.completed").data["text"] == "fine now"


@pytest.mark.django_db(transaction=True)
def test_an_unknown_model_fails_the_turn_without_retries(local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model("anthropic:claude-nope")
    anthropic_server.replies.append(Reply(404, body={"type": "error", "error": {"type": "not_found_error", "message": "model: claude-nope"}}))
    session_id = start(local, "remote", "hi")
    failed = Event.objects.get(session_id=session_id, type="turn.failed")
    assert failed.data["code"] == "model_error" and "claude-nope" in failed.data["error"]
    assert len(anthropic_server.requests) == 1
