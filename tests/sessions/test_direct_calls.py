"""Deterministic tool calls: one server tool, no model, over HTTP
(`POST /<slug>/v1/tools/<name>/call`) and `manage.py call`. Bound to a session
they share its execution lock and its dryRun/asOf options."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions.eventlog.events import read_events
from sessions.models import Event, Session, ToolCall, Turn

transactional = pytest.mark.django_db(transaction=True)

LOOKUP = "/support/v1/tools/lookup_order/call"
REFUND = "/support/v1/tools/refund_order/call"


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str = "hello", **fields) -> str:
    response = post_json(client, "/support/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    return error


@transactional
def test_a_call_without_a_session_returns_the_tool_output(alice, support_agent):
    response = post_json(alice, LOOKUP, {"input": {"order_id": "A100"}})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["toolName"] == "lookup_order" and body["stubbed"] is False
    assert body["output"] == {"orderId": "A100", "status": "delivered", "items": ["teapot"], "total": 34.5}
    assert body["callId"].startswith("call_") and body["durationMs"] >= 0
    # No session, no turn, no events.
    assert not Turn.objects.exists() and not Event.objects.exists()


@transactional
def test_invalid_input_is_a_400_whose_details_name_the_field(alice, support_agent):
    wrong = assert_error(post_json(alice, LOOKUP, {"input": {"order_id": "nope"}}), 400, "invalid_input")
    assert [d["field"] for d in wrong["details"]] == ["order_id"]
    assert "order_id" in wrong["message"]

    missing = assert_error(post_json(alice, REFUND, {"input": {"order_id": "A100"}}), 400, "invalid_input")
    assert [d["field"] for d in missing["details"]] == ["reason"]
    assert missing["details"][0]["type"] == "missing"

    # The envelope itself is strict too: `input` must be an object, unknown fields are refused.
    assert post_json(alice, LOOKUP, {"input": "A100"}).status_code == 400
    assert post_json(alice, LOOKUP, {"input": {}, "extra": 1}).status_code == 400


@transactional
def test_an_unknown_tool_is_a_404_naming_the_tools(alice, support_agent):
    error = assert_error(post_json(alice, "/support/v1/tools/launch_rocket/call", {"input": {}}), 404, "tool_not_found")
    assert "lookup_order" in error["message"] and "refund_order" in error["message"]
    # Built-ins belong to model turns, not to the deterministic route.
    assert_error(post_json(alice, "/support/v1/tools/load_skill/call", {"input": {"name": "x"}}), 404, "tool_not_found")
    assert post_json(alice, "/nobody/v1/tools/lookup_order/call", {"input": {}}).status_code == 404


@transactional
def test_a_tool_that_raises_is_a_completed_call_answered_200_with_is_error(alice, support_agent):
    response = post_json(alice, LOOKUP, {"input": {"order_id": "Z999"}})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["isError"] is True and body["error"] == "LookupError: no order Z999"
    assert body["toolName"] == "lookup_order" and "output" not in body and body["stubbed"] is False
    assert not Turn.objects.exists() and not Event.objects.exists()
    # A call that succeeds says so too.
    assert post_json(alice, LOOKUP, {"input": {"order_id": "A100"}}).json()["isError"] is False


@transactional
def test_a_session_bound_call_records_its_events_and_releases_the_session(alice, support_agent, sync_turns):
    session_id = start(alice)
    before = len(read_events(session_id))

    response = post_json(alice, LOOKUP, {"input": {"order_id": "A101"}, "sessionId": session_id})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["output"]["status"] == "shipped" and body["stubbed"] is False
    found = read_events(session_id)
    assert [e["index"] for e in found] == list(range(len(found)))
    added = found[before:]
    assert [e["type"] for e in added] == ["actions.requested", "action.result"]
    assert added[0]["data"]["calls"] == [
        {"callId": body["callId"], "toolName": "lookup_order", "input": {"order_id": "A101"}, "direct": True}
    ]
    assert added[1]["data"]["output"] == body["output"] and added[1]["data"]["callId"] == body["callId"]
    turn = Turn.objects.get(pk=added[0]["turnId"])
    assert turn.trigger == Turn.Trigger.TOOL and turn.status == Turn.Status.COMPLETED
    assert ToolCall.objects.get(turn=turn).status == ToolCall.Status.DONE
    session = Session.objects.get(pk=session_id)
    assert session.active_turn_id is None and session.status == Session.Status.WAITING

    # The lock was released: the session takes a follow-up turn as usual.
    follow = post_json(alice, f"/support/v1/session/{session_id}/message", {"message": "after the call"})
    assert follow.status_code == 202, follow.content
    assert [e["type"] for e in read_events(session_id)][-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_a_session_bound_call_that_fails_is_a_200_with_is_error_recorded_on_the_session(alice, support_agent,
                                                                                        sync_turns):
    session_id = start(alice)

    response = post_json(alice, LOOKUP, {"input": {"order_id": "Z999"}, "sessionId": session_id})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["isError"] is True and body["error"] == "LookupError: no order Z999" and "output" not in body
    requested, result = read_events(session_id)[-2:]
    assert requested["type"] == "actions.requested" and requested["data"]["calls"][0]["callId"] == body["callId"]
    assert result["type"] == "action.result" and result["data"]["error"] == "LookupError: no order Z999"
    assert result["data"]["callId"] == body["callId"]
    row = ToolCall.objects.get(call_id=body["callId"])
    assert row.status == ToolCall.Status.FAILED and row.error == body["error"]
    assert row.turn.trigger == Turn.Trigger.TOOL and row.turn.status == Turn.Status.COMPLETED
    assert Session.objects.get(pk=session_id).active_turn_id is None


@transactional
def test_a_call_while_a_turn_runs_is_409_session_busy(alice, support_agent, sync_turns):
    session_id = start(alice)
    # A turn holding the session's execution lock, as a worker does mid-turn.
    running = Turn.objects.create(session_id=session_id, status=Turn.Status.RUNNING, message="long job")
    Session.objects.filter(pk=session_id).update(active_turn=running, status=Session.Status.RUNNING)
    events_before = len(read_events(session_id))
    turns_before = Turn.objects.count()

    error = assert_error(post_json(alice, LOOKUP, {"input": {"order_id": "A100"}, "sessionId": session_id}), 409,
                         "session_busy")
    assert "turn is running" in error["message"]

    # Nothing recorded and the lock still belongs to the running turn.
    assert len(read_events(session_id)) == events_before
    assert Turn.objects.count() == turns_before and not ToolCall.objects.filter(session_id=session_id).exists()
    assert Session.objects.get(pk=session_id).active_turn_id == running.id
    # A session-less call is not bound by that lock.
    assert post_json(alice, LOOKUP, {"input": {"order_id": "A100"}}).status_code == 200


@transactional
def test_a_call_on_a_parked_session_is_busy_too(alice, support_agent, sync_turns, tmp_path):
    session_id = start(alice)
    parked = Turn.objects.create(session_id=session_id, status=Turn.Status.AWAITING_APPROVAL, message="gated")
    Session.objects.filter(pk=session_id).update(active_turn=parked, status=Session.Status.RUNNING)

    assert_error(post_json(alice, LOOKUP, {"input": {"order_id": "A100"}, "sessionId": session_id}), 409, "session_busy")


@transactional
def test_a_session_of_another_principal_or_agent_is_refused(alice, bob, support_agent, sync_turns):
    session_id = start(alice)

    assert_error(post_json(bob, LOOKUP, {"input": {"order_id": "A100"}, "sessionId": session_id}), 403, "forbidden")
    assert_error(post_json(alice, LOOKUP, {"input": {"order_id": "A100"}, "sessionId": "ses_nope"}), 404,
                 "session_not_found")
    assert not ToolCall.objects.exists()


@transactional
def test_a_dry_run_session_stubs_write_tools_and_runs_read_tools(alice, support_agent, sync_turns):
    session_id = start(alice, dryRun=True)

    refund = post_json(alice, REFUND, {"input": {"order_id": "A100", "reason": "broken"}, "sessionId": session_id})
    assert refund.status_code == 200, refund.content
    assert refund.json()["stubbed"] is True
    assert refund.json()["output"] == {"refunded": False, "dryRun": True}
    result = read_events(session_id)[-1]
    assert result["type"] == "action.result" and result["data"]["stubbed"] is True
    assert ToolCall.objects.get(call_id=refund.json()["callId"]).stubbed

    lookup = post_json(alice, LOOKUP, {"input": {"order_id": "A100"}, "sessionId": session_id})
    assert lookup.json()["stubbed"] is False and lookup.json()["output"]["status"] == "delivered"

    # Without the session the same write really runs.
    real = post_json(alice, REFUND, {"input": {"order_id": "A100", "reason": "broken"}})
    assert real.json()["stubbed"] is False and real.json()["output"]["refunded"] is True


# --- manage.py call -----------------------------------------------------------------


def call(*args: str) -> dict:
    out = StringIO()
    call_command("call", *args, stdout=out)
    return json.loads(out.getvalue())


@transactional
def test_the_call_command_prints_the_result_as_json(support_agent):
    result = call("support", "lookup_order", "--input", '{"order_id": "A102"}')

    assert result["toolName"] == "lookup_order"
    assert result["output"] == {"orderId": "A102", "status": "processing", "items": ["kettle"], "total": 59.9}
    assert result["stubbed"] is False


@transactional
def test_the_call_command_binds_to_a_session_and_its_dry_run(alice, support_agent, sync_turns):
    session_id = start(alice, dryRun=True)

    result = call("support", "refund_order", "--input", '{"order_id": "A100", "reason": "late"}', "--session", session_id)

    assert result["stubbed"] is True and result["output"] == {"refunded": False, "dryRun": True}
    assert [e["type"] for e in read_events(session_id)][-2:] == ["actions.requested", "action.result"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("nobody", "lookup_order"), "no agent 'nobody'"),
        (("support", "lookup_order", "--input", "{not json"), "--input is not JSON"),
        (("support", "lookup_order", "--input", '{"order_id": 5}'), "invalid_input: invalid input: order_id"),
        (("support", "launch_rocket"), "tool_not_found"),
        (("support", "lookup_order", "--input", '{"order_id": "Z999"}'), "tool_error: LookupError"),
        (("support", "lookup_order", "--input", '{"order_id": "A100"}', "--session", "ses_nope"), "no session 'ses_nope'"),
    ],
)
@transactional
def test_the_call_command_fails_with_a_message_that_says_why(support_agent, args, message):
    with pytest.raises(CommandError) as raised:
        call(*args)
    assert message in str(raised.value)
