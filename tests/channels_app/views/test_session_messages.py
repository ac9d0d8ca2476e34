"""Follow-ups (POST .../message and POST /session with a token), continuation tokens, and turns that call tools.

Bad input is in tests/channels_app/test_bad_*.py, who may do what in test_auth_policies.py."""
from __future__ import annotations

import hashlib
import json

import pytest

from sessions.models import Event, Session, Turn
from tests.channels_app.views.http import (
    LOOKUP_A100, create, created, event_types, events_of, post_json, transactional,
)


# -- follow-ups and continuation tokens ---------------------------------------

@transactional
def test_a_follow_up_answers_202_and_runs_a_second_turn(local, support_agent, sync_turns):
    first = created(local, "hello")
    session_id = first["sessionId"]

    response = post_json(local, f"/support/v1/session/{session_id}/message",
                         {"message": "again", "continuationToken": first["continuationToken"]})

    assert response.status_code == 202
    body = response.json()
    assert body["sessionId"] == session_id
    assert body["admission"] == "preempt"
    assert body["turnId"].startswith("turn_")
    assert [e["text"] for e in events_of(session_id, "message.completed")] == ["You said: hello", "You said: again"]
    assert event_types(session_id).count("session.waiting") == 2


@transactional
def test_the_model_sees_the_earlier_turns_of_the_conversation(local, support_agent, sync_turns):
    first = created(local, "hello")
    post_json(local, f"/support/v1/session/{first['sessionId']}/message", {"message": "again"})

    conversation = Session.objects.get(pk=first["sessionId"]).conversation
    assert [(m["role"], m["content"]) for m in conversation] == [
        ("user", "hello"), ("assistant", "You said: hello"), ("user", "again"), ("assistant", "You said: again"),
    ]


@transactional
def test_continuation_token_rotates_on_each_follow_up_and_the_old_one_gets_409(local, support_agent, sync_turns):
    first = created(local, "hello")
    url = f"/support/v1/session/{first['sessionId']}/message"
    token1 = first["continuationToken"]

    token2 = post_json(local, url, {"message": "two", "continuationToken": token1}).json()["continuationToken"]
    assert token2 != token1

    stale = post_json(local, url, {"message": "three", "continuationToken": token1})
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_continuation_token"
    assert stale.json()["error"]["message"]

    token3 = post_json(local, url, {"message": "three", "continuationToken": token2})
    assert token3.status_code == 202
    assert token3.json()["continuationToken"] not in (token1, token2)
    # The refused follow-up started no turn.
    assert Turn.objects.filter(session_id=first["sessionId"]).count() == 3


@transactional
def test_a_stale_token_on_post_session_gets_409(local, support_agent, sync_turns):
    first = created(local, "hello")
    token1 = first["continuationToken"]
    followed = create(local, "two", continuationToken=token1)
    assert followed.status_code == 202
    assert followed.json()["sessionId"] == first["sessionId"]

    stale = create(local, "three", continuationToken=token1)

    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_continuation_token"


@transactional
def test_post_session_with_a_continuation_token_continues_that_session(local, support_agent, sync_turns):
    first = created(local, "hello")

    response = create(local, "again", continuationToken=first["continuationToken"])

    assert response.status_code == 202
    assert response.json()["sessionId"] == first["sessionId"]
    assert Session.objects.count() == 1
    assert [e["text"] for e in events_of(first["sessionId"], "message.completed")][-1] == "You said: again"


@pytest.mark.django_db
def test_a_continuation_token_of_no_session_gets_404(local, support_agent):
    for token in ("ct_ses_000000000000000000000000.abc", "not-a-token"):
        response = create(local, "hello", continuationToken=token)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "session_not_found"


@transactional
def test_a_token_of_another_session_is_stale_on_this_one(local, support_agent, sync_turns):
    one = created(local, "one")
    two = created(local, "two")

    response = post_json(local, f"/support/v1/session/{one['sessionId']}/message",
                         {"message": "hi", "continuationToken": two["continuationToken"]})

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "stale_continuation_token"


@transactional
def test_the_continuation_token_is_stored_only_as_its_sha256(local, support_agent, sync_turns):
    first = created(local, "hello")
    reply = post_json(local, f"/support/v1/session/{first['sessionId']}/message",
                      {"message": "again", "continuationToken": first["continuationToken"]}).json()
    token = reply["continuationToken"]

    session = Session.objects.get(pk=first["sessionId"])
    assert session.continuation_token_hash == hashlib.sha256(token.encode()).hexdigest()
    stored = json.dumps([
        list(Session.objects.filter(pk=session.pk).values()),
        list(Turn.objects.filter(session=session).values()),
        list(Event.objects.filter(session=session).values()),
    ], default=str)
    for issued in (first["continuationToken"], token):
        assert issued not in stored
        # Not even the random part alone.
        assert issued.split(".", 1)[1] not in stored

# -- tool turns ------------------------------------------------------------------

@transactional
def test_a_tool_call_records_the_request_and_the_tool_output(local, support_agent, sync_turns):
    session_id = created(local, LOOKUP_A100)["sessionId"]

    types = event_types(session_id)
    assert types[types.index("turn.started"):] == [
        "turn.started", "step.started", "step.completed", "actions.requested", "action.result",
        "step.started", "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    [requested] = events_of(session_id, "actions.requested")
    [call] = requested["calls"]
    assert call["toolName"] == "lookup_order"
    assert call["input"] == {"order_id": "A100"}
    [result] = events_of(session_id, "action.result")
    assert result["callId"] == call["callId"]
    assert result["output"] == {"orderId": "A100", "status": "delivered", "items": ["teapot"], "total": 34.5}
    assert "error" not in result
    assert result["stubbed"] is False
    reply = events_of(session_id, "message.completed")[-1]["text"]
    assert reply.startswith("Tool results:\nlookup_order (ok):")
    assert '"status": "delivered"' in reply


@transactional
def test_invalid_tool_input_is_an_action_result_error_the_model_sees(local, support_agent, sync_turns):
    session_id = created(local, '/call lookup_order {"order_id": "not an id"}')["sessionId"]

    [result] = events_of(session_id, "action.result")
    assert "output" not in result
    assert result["error"].startswith("invalid input: order_id:")
    reply = events_of(session_id, "message.completed")[-1]["text"]
    assert "lookup_order (error): invalid input: order_id:" in reply
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_a_tool_that_raises_is_an_action_result_error(local, support_agent, sync_turns):
    session_id = created(local, '/call lookup_order {"order_id": "Z999"}')["sessionId"]

    [result] = events_of(session_id, "action.result")
    assert result["error"] == "LookupError: no order Z999"
    assert "lookup_order (error): LookupError: no order Z999" in events_of(session_id, "message.completed")[-1]["text"]
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_calling_a_tool_the_agent_lacks_is_an_action_result_error(local, support_agent, sync_turns):
    session_id = created(local, "/call delete_everything {}")["sessionId"]

    [result] = events_of(session_id, "action.result")
    assert result["error"] == "unknown tool 'delete_everything'; available tools: cancel_order, lookup_order, refund_order"
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_parallel_tool_calls_each_get_a_result(local, support_agent, sync_turns):
    message = '/call lookup_order {"order_id": "A100"}\n/call lookup_order {"order_id": "A101"}'
    session_id = created(local, message)["sessionId"]

    [requested] = events_of(session_id, "actions.requested")
    results = events_of(session_id, "action.result")
    assert [c["input"]["order_id"] for c in requested["calls"]] == ["A100", "A101"]
    assert [r["callId"] for r in results] == [c["callId"] for c in requested["calls"]]
    assert [r["output"]["status"] for r in results] == ["delivered", "shipped"]


REFUND_A100 = '/call refund_order {"order_id": "A100", "reason": "arrived broken"}'


@transactional
def test_a_dry_run_session_stubs_write_tools_with_their_dry_run_result(local, support_agent, sync_turns):
    session_id = created(local, REFUND_A100 + "\n" + LOOKUP_A100, dryRun=True)["sessionId"]

    refund, lookup = events_of(session_id, "action.result")
    assert refund["toolName"] == "refund_order"
    assert refund["stubbed"] is True
    assert refund["output"] == {"refunded": False, "dryRun": True}
    # Read tools still run for real.
    assert lookup["stubbed"] is False
    assert lookup["output"]["status"] == "delivered"


@transactional
def test_without_dry_run_a_write_tool_runs_and_sees_the_as_of_instant(local, support_agent, sync_turns):
    session_id = created(local, REFUND_A100, asOf="2026-01-31T12:00:00Z")["sessionId"]

    [refund] = events_of(session_id, "action.result")
    assert refund["stubbed"] is False
    assert refund["output"] == {
        "orderId": "A100", "refunded": True, "reason": "arrived broken", "at": "2026-01-31T12:00:00+00:00",
    }
