"""The OpenAI-compatible provider, driven by the real `openai` client against a
loopback server that speaks Chat Completions streaming."""
from __future__ import annotations

import pytest

from sessions.models import Event, Session
from tests.providers.conftest import event_types, start
from tests.providers.loopback import Reply, oa_text, oa_tool_calls

TWO_CALLS = [("call_a", "lookup_order", {"order_id": "A100"}), ("call_b", "lookup_order", {"order_id": "A101"})]


@pytest.mark.django_db(transaction=True)
def test_a_two_tool_turn_streams_the_same_events_as_the_scripted_model(local, agent_on_model, openai_server, sync_turns):
    agent_on_model("openai:gpt-test")
    openai_server.replies.extend([
        Reply(events=oa_tool_calls(TWO_CALLS, prompt=120, completion=30)),
        Reply(events=oa_text("Both orders are on their way.", prompt=200, completion=12)),
    ])
    remote = start(local, "remote", "where are A100 and A101?")

    agent_on_model("scripted:echo", slug="offline")
    offline = start(local, "offline", '/call lookup_order {"order_id": "A100"}\n/call lookup_order {"order_id": "A101"}')

    assert event_types(remote) == event_types(offline)
    assert "actions.requested" in event_types(remote)
    results = Event.objects.filter(session_id=remote, type="action.result").order_by("index")
    assert [r.data["callId"] for r in results] == ["call_a", "call_b"]
    assert results[0].data["output"]["status"] == "delivered"
    completed = Event.objects.get(session_id=remote, type="turn.completed")
    assert completed.data["usage"] == {"inputTokens": 320, "outputTokens": 42, "cacheReadTokens": 0, "cacheWriteTokens": 0,
                                       "costUsd": None, "unpricedCalls": 2}  # gpt-test has no known price
    assert Event.objects.get(session_id=remote, type="message.completed").data["text"] == "Both orders are on their way."


@pytest.mark.django_db(transaction=True)
def test_the_second_request_carries_the_tool_calls_and_results(local, agent_on_model, openai_server, sync_turns):
    agent_on_model("openai:gpt-test", {"temperature": 0.2})
    openai_server.replies.extend([Reply(events=oa_tool_calls(TWO_CALLS)), Reply(events=oa_text("done"))])
    start(local, "remote", "check both")

    first, second = (r["body"] for r in openai_server.requests)
    assert first["model"] == "gpt-test" and first["stream"] is True and first["temperature"] == 0.2
    assert first["messages"][0]["role"] == "system"
    assert {t["function"]["name"] for t in first["tools"]} == {"cancel_order", "lookup_order", "refund_order"}
    assistant = second["messages"][-3]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert [m["tool_call_id"] for m in second["messages"][-2:]] == ["call_a", "call_b"]
    assert openai_server.requests[0]["headers"]["authorization"] == "Bearer sk-test"


@pytest.mark.django_db(transaction=True)
def test_workspace_tools_reach_the_model_as_functions_with_their_schemas(local, agent_on_model, openai_server,
                                                                         sync_turns):
    agent_on_model("openai:gpt-test", tools=["read", "ls"])
    openai_server.replies.append(Reply(events=oa_text("done")))
    start(local, "remote", "what is in my workspace?")

    [request] = [r["body"] for r in openai_server.requests]
    functions = {t["function"]["name"]: t["function"] for t in request["tools"]}
    assert set(functions) == {"cancel_order", "lookup_order", "refund_order", "read", "ls"}
    assert functions["read"]["parameters"]["required"] == ["path"]
    assert "## Workspace" in request["messages"][0]["content"]


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_is_retried_and_the_turn_completes(local, agent_on_model, openai_server, sync_turns):
    agent_on_model("openai:gpt-test")
    openai_server.replies.extend([
        Reply(429, headers={"retry-after": "0.1"}, body={"error": {"message": "slow down", "type": "rate_limit"}}),
        Reply(events=oa_text("after the wait")),
    ])
    session_id = start(local, "remote", "hi")
    assert len(openai_server.requests) == 2
    assert Event.objects.get(session_id=session_id, type="message.completed").data["text"] == "after the wait"
    assert Session.objects.get(pk=session_id).status == "waiting"


@pytest.mark.django_db(transaction=True)
def test_bad_credentials_fail_the_turn_clearly(local, agent_on_model, openai_server, sync_turns):
    agent_on_model("openai:gpt-test")
    openai_server.replies.append(Reply(401, body={"error": {"message": "invalid api key", "type": "invalid_request_error"}}))
    session_id = start(local, "remote", "hi")
    failed = Event.objects.get(session_id=session_id, type="turn.failed")
    assert failed.data["code"] == "auth_error"
    assert "invalid api key" in failed.data["error"]
    assert len(openai_server.requests) == 1  # auth errors are not retried
    assert event_types(session_id)[-1] == "session.waiting"


@pytest.mark.django_db(transaction=True)
def test_cached_prompt_tokens_are_reported_as_cache_reads_and_priced(local, agent_on_model, openai_server, sync_turns):
    from tests.providers.loopback import oa_chunk, oa_usage

    agent_on_model("openai:gpt-4o")
    openai_server.replies.append(Reply(events=[oa_chunk({"content": "ok"}), oa_chunk({}, "stop"), oa_usage(100, 4, cached=60)]))
    session_id = start(local, "remote", "hi")
    usage = Event.objects.get(session_id=session_id, type="turn.completed").data["usage"]
    # $2.50 in, $10 out, $1.25 cache read a million tokens (the pinned genai-prices table)
    assert usage == {"inputTokens": 40, "outputTokens": 4, "cacheReadTokens": 60, "cacheWriteTokens": 0,
                     "costUsd": (40 * 2.5 + 4 * 10 + 60 * 1.25) / 1e6}


@pytest.mark.django_db(transaction=True)
def test_a_server_that_reports_no_usage_leaves_the_turns_usage_unknown_not_zero(local, agent_on_model, openai_server,
                                                                                 sync_turns):
    from sessions.models import Turn
    from tests.providers.loopback import oa_chunk

    agent_on_model("openai:gpt-test")
    openai_server.replies.append(Reply(events=[oa_chunk({"content": "ok"}), oa_chunk({}, "stop")]))  # no usage chunk
    session_id = start(local, "remote", "hi")

    assert Event.objects.get(session_id=session_id, type="step.completed").data["usage"] is None
    assert Event.objects.get(session_id=session_id, type="turn.completed").data["usage"] is None
    assert Turn.objects.get(session_id=session_id).usage is None
    # The session's totals count only what is known.
    assert Session.objects.get(pk=session_id).usage == {}


@pytest.mark.django_db(transaction=True)
def test_model_text_the_databases_cannot_store_is_cleaned_and_the_turn_completes(local, agent_on_model, openai_server,
                                                                                   sync_turns):
    agent_on_model("openai:gpt-test")
    openai_server.replies.append(Reply(events=oa_text("nul \x00 and surrogate \ud800 end", pieces=1)))
    session_id = start(local, "remote", "say something odd")

    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]
    text = Event.objects.get(session_id=session_id, type="message.completed").data["text"]
    assert text == "nul \ufffd and surrogate \ufffd end"
    assert Session.objects.get(pk=session_id).conversation[-1]["content"] == text


@pytest.mark.django_db(transaction=True)
def test_a_streamed_replys_first_delta_is_written_on_its_own(local, agent_on_model, openai_server, sync_turns, settings):
    """The reader's first token does not wait out the coalescing window; the rest coalesce."""
    settings.AGENTSITE_DELTA_FLUSH_SECONDS = 5.0  # nothing else would be written before the reply ends
    agent_on_model("openai:gpt-test")
    openai_server.replies.append(Reply(events=oa_text("One, two, three, four, five, six.", pieces=6)))

    session = start(local, "remote", "count")

    deltas = [e.data["delta"] for e in Event.objects.filter(session_id=session, type="message.appended").order_by("index")]
    assert deltas == ["One, ", "two, three, four, five, six."]
