"""A provider's failure falls over only to a fallback the agent declares, visibly (`model.fallback`),
with the turn's usage per model; the session stays bound to its own model. Real SDK clients
against loopback servers of both protocols."""
from __future__ import annotations

import pytest

from sessions.models import Event, Session
from tests.providers.conftest import event_types, start
from tests.providers.loopback import Reply, an_start, an_text, an_tool_uses, oa_text

NO_RETRIES = {"max_retries": 0}
RATE_LIMITED = Reply(429, body={"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})


def events_of(session_id: str, type_: str) -> list[dict]:
    return [e.data for e in Event.objects.filter(session_id=session_id, type=type_).order_by("index")]


@pytest.mark.django_db(transaction=True)
def test_a_rate_limited_call_falls_over_to_the_declared_fallback(local, agent_on_model, anthropic_server,
                                                                 openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(RATE_LIMITED)
    openai_server.replies.append(Reply(events=oa_text("answered elsewhere", prompt=12, completion=4)))

    session_id = start(local, "remote", "hi")

    fallbacks = events_of(session_id, "model.fallback")
    assert len(fallbacks) == 1
    fell = fallbacks[0]
    assert (fell["from"], fell["to"], fell["reason"], fell["step"]) == (
        "anthropic:claude-test", "openai:gpt-test", "rate_limited", 1)
    assert "slow down" in fell["error"]
    assert events_of(session_id, "message.completed")[0]["text"] == "answered elsewhere"
    types = event_types(session_id)
    assert types.index("step.started") < types.index("model.fallback") < types.index("message.appended")
    usage = events_of(session_id, "turn.completed")[0]["usage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (12, 4)
    assert usage["byModel"] == {
        # The failed call reported nothing, so it is not counted as unpriced; the answer's model has no price.
        "anthropic:claude-test": {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0},
        "openai:gpt-test": {"inputTokens": 12, "outputTokens": 4, "cacheReadTokens": 0, "cacheWriteTokens": 0,
                            "costUsd": None, "unpricedCalls": 1},
    }
    # The fallback got the same request, in its own protocol.
    assert openai_server.requests[0]["body"]["messages"][-1] == {"role": "user", "content": "hi"}
    assert Session.objects.get(pk=session_id).model == "anthropic:claude-test"


@pytest.mark.django_db(transaction=True)
def test_without_a_declared_fallback_the_turn_fails_with_the_providers_error(local, agent_on_model, anthropic_server,
                                                                             openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES)
    anthropic_server.replies.append(RATE_LIMITED)

    session_id = start(local, "remote", "hi")

    failed = events_of(session_id, "turn.failed")[0]
    assert failed["code"] == "rate_limited" and "slow down" in failed["error"]
    assert "byModel" not in (failed["usage"] or {})
    assert "model.fallback" not in event_types(session_id)
    assert openai_server.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_server_error_falls_over(local, agent_on_model, anthropic_server, openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(Reply(500, body={"type": "error", "error": {"type": "api_error", "message": "boom"}}))
    openai_server.replies.append(Reply(events=oa_text("fine")))

    session_id = start(local, "remote", "hi")

    assert [f["reason"] for f in events_of(session_id, "model.fallback")] == ["server_error"]
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@pytest.mark.django_db(transaction=True)
def test_a_bad_request_does_not_fall_over(local, agent_on_model, anthropic_server, openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(Reply(400, body={"type": "error", "error": {
        "type": "invalid_request_error", "message": "messages: bad shape"}}))

    session_id = start(local, "remote", "hi")

    failed = events_of(session_id, "turn.failed")[0]
    assert failed["code"] == "model_error" and "bad shape" in failed["error"]
    assert "model.fallback" not in event_types(session_id)
    assert openai_server.requests == []


@pytest.mark.django_db(transaction=True)
def test_fallbacks_are_tried_in_order_and_each_fall_over_is_an_event(local, agent_on_model, anthropic_server,
                                                                     openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["anthropic:claude-spare", "openai:gpt-test"])
    anthropic_server.replies.extend([
        Reply(529, body={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        Reply(503, body={"type": "error", "error": {"type": "api_error", "message": "unavailable"}}),
    ])
    openai_server.replies.append(Reply(events=oa_text("third time")))

    session_id = start(local, "remote", "hi")

    assert [(f["from"], f["to"], f["reason"]) for f in events_of(session_id, "model.fallback")] == [
        ("anthropic:claude-test", "anthropic:claude-spare", "overloaded"),
        ("anthropic:claude-spare", "openai:gpt-test", "overloaded"),
    ]
    assert [r["body"]["model"] for r in anthropic_server.requests] == ["claude-test", "claude-spare"]
    assert set(events_of(session_id, "turn.completed")[0]["usage"]["byModel"]) == {
        "anthropic:claude-test", "anthropic:claude-spare", "openai:gpt-test"}


@pytest.mark.django_db(transaction=True)
def test_the_last_fallbacks_failure_fails_the_turn(local, agent_on_model, anthropic_server, openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(RATE_LIMITED)
    openai_server.replies.append(Reply(500, body={"error": {"message": "down too", "type": "server_error"}}))

    session_id = start(local, "remote", "hi")

    assert len(events_of(session_id, "model.fallback")) == 1
    failed = events_of(session_id, "turn.failed")[0]
    assert failed["code"] == "server_error" and "down too" in failed["error"]


@pytest.mark.django_db(transaction=True)
def test_a_failure_after_text_was_streamed_does_not_fall_over(local, agent_on_model, anthropic_server,
                                                              openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(Reply(events=[
        an_start(10),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an ans"}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded mid-stream"}},
    ]))

    session_id = start(local, "remote", "hi")

    failed = events_of(session_id, "turn.failed")[0]
    assert failed["code"] == "overloaded"
    assert "model.fallback" not in event_types(session_id)
    assert "".join(e["delta"] for e in events_of(session_id, "message.appended")) == "Half an ans"
    assert openai_server.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_timeout_falls_over(local, agent_on_model, anthropic_server, openai_server, sync_turns):
    agent_on_model("anthropic:claude-test", {"max_retries": 0, "timeout": 0.3}, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(Reply(events=an_text("too late"), delay=2))
    openai_server.replies.append(Reply(events=oa_text("in time")))

    session_id = start(local, "remote", "hi")

    assert [f["reason"] for f in events_of(session_id, "model.fallback")] == ["timeout"]
    assert events_of(session_id, "message.completed")[0]["text"] == "in time"


@pytest.mark.django_db(transaction=True)
def test_the_next_turn_starts_again_on_the_sessions_model(local, agent_on_model, anthropic_server, openai_server,
                                                          sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.extend([RATE_LIMITED, Reply(events=an_text("back home", input_tokens=7))])
    openai_server.replies.append(Reply(events=oa_text("answered elsewhere")))
    created = local.post("/remote/v1/session", {"message": "hi"}, content_type="application/json").json()

    follow = local.post(f"/remote/v1/session/{created['sessionId']}/message",
                        {"message": "again", "continuationToken": created["continuationToken"]},
                        content_type="application/json")

    assert follow.status_code == 202, follow.content
    session_id = created["sessionId"]
    assert len(events_of(session_id, "model.fallback")) == 1
    assert [e["text"] for e in events_of(session_id, "message.completed")] == ["answered elsewhere", "back home"]
    second = events_of(session_id, "turn.completed")[1]["usage"]
    assert "byModel" not in second and second["inputTokens"] == 7
    # The second turn sends the primary the whole conversation, the fallback's reply included.
    sent = anthropic_server.requests[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == [{"type": "text", "text": "answered elsewhere"}]
    assert Session.objects.get(pk=session_id).model == "anthropic:claude-test"


@pytest.mark.django_db(transaction=True)
def test_a_parked_turn_resumes_on_the_model_it_fell_over_to(local, agent_on_model, anthropic_server, openai_server,
                                                            sync_turns):
    from tests.providers.loopback import oa_tool_calls

    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["openai:gpt-test"])
    anthropic_server.replies.append(RATE_LIMITED)
    openai_server.replies.extend([
        Reply(events=oa_tool_calls([("call_1", "cancel_order", {"order_id": "A102"})], prompt=20, completion=8)),
        Reply(events=oa_text("Cancelled.", prompt=30, completion=3)),
    ])
    session_id = start(local, "remote", "cancel A102")
    assert event_types(session_id)[-1] == "action.approval_requested"

    approved = local.post(f"/remote/v1/session/{session_id}/approvals/call_1", {"decision": "approve"},
                          content_type="application/json")

    assert approved.status_code == 200, approved.content
    assert len(anthropic_server.requests) == 1 and len(openai_server.requests) == 2
    assert events_of(session_id, "message.completed")[-1]["text"] == "Cancelled."
    usage = events_of(session_id, "turn.completed")[0]["usage"]
    assert usage["byModel"]["openai:gpt-test"]["inputTokens"] == 50
    assert len(events_of(session_id, "model.fallback")) == 1


def thinking_sent(body: dict) -> list[tuple[str, str]]:
    return [(block["thinking"], block["signature"]) for message in body["messages"] if isinstance(message["content"], list)
            for block in message["content"] if block["type"] == "thinking"]


@pytest.mark.django_db(transaction=True)
def test_each_model_is_sent_only_the_thinking_it_signed(local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["anthropic:claude-spare"])
    anthropic_server.signs_thinking = True  # it refuses a thinking block another model signed
    anthropic_server.replies.extend([
        Reply(events=an_text("first", thinking="mine")),  # the session's model
        RATE_LIMITED,  # the next turn: the session's model is busy, its fallback answers
        Reply(events=an_text("second", thinking="the spare's")),
        Reply(events=an_text("third", thinking="mine again")),  # the turn after: the session's model again
    ])
    created = local.post("/remote/v1/session", {"message": "one"}, content_type="application/json").json()
    session_id, token = created["sessionId"], created["continuationToken"]
    for message in ("two", "three"):
        sent = local.post(f"/remote/v1/session/{session_id}/message", {"message": message, "continuationToken": token},
                          content_type="application/json")
        assert sent.status_code == 202, sent.content
        token = sent.json()["continuationToken"]

    assert [e["text"] for e in events_of(session_id, "message.completed")] == ["first", "second", "third"]
    assert "turn.failed" not in event_types(session_id)
    bodies = [r["body"] for r in anthropic_server.requests]
    assert [b["model"] for b in bodies] == ["claude-test", "claude-test", "claude-spare", "claude-test"]
    assert thinking_sent(bodies[2]) == []  # the fallback: not the session's model's thinking
    assert [m["role"] for m in bodies[2]["messages"]] == ["user", "assistant", "user"]
    # The session's model: its own thinking back as it signed it, the fallback's left out.
    assert thinking_sent(bodies[3]) == [("mine", "signed-by:claude-test")]
    assert bodies[3]["messages"][3]["content"] == [{"type": "text", "text": "second"}]


@pytest.mark.django_db(transaction=True)
def test_a_fallback_gets_its_own_thinking_back_for_the_rest_of_the_turn(local, agent_on_model, anthropic_server,
                                                                        sync_turns):
    agent_on_model("anthropic:claude-test", NO_RETRIES, fallback=["anthropic:claude-spare"])
    anthropic_server.signs_thinking = True
    anthropic_server.replies.extend([
        RATE_LIMITED,
        Reply(events=an_tool_uses([("toolu_1", "look_up", {"q": "x"})], thinking="I should look it up")),
        Reply(events=an_text("done")),
    ])

    session_id = start(local, "remote", "hi")

    assert events_of(session_id, "message.completed")[-1]["text"] == "done"
    bodies = [r["body"] for r in anthropic_server.requests]
    assert [b["model"] for b in bodies] == ["claude-test", "claude-spare", "claude-spare"]
    # The step after its tool call hands the fallback its thinking back, as a tool-use turn must.
    assert thinking_sent(bodies[2]) == [("I should look it up", "signed-by:claude-spare")]
