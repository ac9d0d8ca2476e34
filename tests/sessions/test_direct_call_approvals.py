"""Direct tool calls of `needs_approval` tools: never run without a decision.

Without a session the call is refused (403 `approval_required`) unless the
tool opts in with `direct_call=True`; bound to a session it parks like a
turn's gated call, holding the session's lock until it is decided (or the
session is stopped or preempted), and approving runs it exactly once.
`manage.py call` does the same, and `--approve` lets the operator approve.
"""
from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Event, Session, ToolCall, Turn
from sessions.turn.recovery import sweep

transactional = pytest.mark.django_db(transaction=True)

# Each run appends a line to a file, so "ran exactly once" and "never ran" are countable.
TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    account: str


@tool(description="{description}", effect="write", needs_approval=True{extra})
def {name}(input: Input, ctx) -> dict:
    with open({path!r}, "a") as f:
        f.write(input.account + "\\n")
    return {{"done": input.account}}
'''

CLOSE = "/desk/v1/tools/close_account/call"
RESET = "/desk/v1/tools/reset_password/call"


@pytest.fixture
def ledger(db, tmp_path) -> Path:
    """The `desk` agent: `close_account` needs approval, `reset_password` too but allows direct calls."""
    path = tmp_path / "ledger.txt"
    root = tmp_path / "desk"
    tools = root / "agent" / "tools"
    tools.mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You manage accounts.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (tools / "close_account.py").write_text(TOOL.format(
        name="close_account", description="Close an account.", extra="", path=str(path)))
    (tools / "reset_password.py").write_text(TOOL.format(
        name="reset_password", description="Reset a password.", extra=", direct_call=True", path=str(path)))
    deploy_agent_folder(root)
    return path


def runs(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str = "hello", **fields) -> tuple[str, str]:
    response = post_json(client, "/desk/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"], response.json()["continuationToken"]


def decide(client, session_id: str, call_id: str, decision: str, reason: str = ""):
    return post_json(client, f"/desk/v1/session/{session_id}/approvals/{call_id}", {"decision": decision, "reason": reason})


def park(client, session_id: str, account: str = "acc-1") -> dict:
    response = post_json(client, CLOSE, {"input": {"account": account}, "sessionId": session_id})
    assert response.status_code == 202, response.content
    return response.json()


def types_after(session_id: str, start: int) -> list[str]:
    return [e["type"] for e in read_events(session_id)[start:]]


# -- without a session -----------------------------------------------------------------

@transactional
def test_the_example_cancel_order_is_refused_with_403_and_never_runs(alice, support_agent):
    response = post_json(alice, "/support/v1/tools/cancel_order/call", {"input": {"order_id": "A102"}})

    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "approval_required"
    assert "sessionId" in error["message"] and "direct_call=True" in error["message"]
    assert not ToolCall.objects.exists() and not Turn.objects.exists() and not Event.objects.exists()


@transactional
def test_a_gated_tool_without_a_session_is_refused_and_does_not_run(alice, ledger):
    response = post_json(alice, CLOSE, {"input": {"account": "acc-1"}})

    assert response.status_code == 403 and response.json()["error"]["code"] == "approval_required"
    assert runs(ledger) == []


@transactional
def test_a_tool_that_allows_direct_calls_runs_at_once_with_or_without_a_session(alice, ledger, sync_turns):
    unbound = post_json(alice, RESET, {"input": {"account": "acc-1"}})
    assert unbound.status_code == 200, unbound.content
    assert unbound.json()["output"] == {"done": "acc-1"}

    session_id, _ = start(alice)
    before = len(read_events(session_id))
    bound = post_json(alice, RESET, {"input": {"account": "acc-2"}, "sessionId": session_id})
    assert bound.status_code == 200, bound.content
    assert types_after(session_id, before) == ["actions.requested", "action.result"]
    assert runs(ledger) == ["acc-1", "acc-2"]


@transactional
def test_the_manifest_and_info_show_which_tools_allow_direct_calls(alice, ledger):
    tools = {t["name"]: t for t in alice.get("/desk/v1/info").json()["tools"]}

    assert (tools["close_account"]["needsApproval"], tools["close_account"]["directCall"]) == (True, False)
    assert (tools["reset_password"]["needsApproval"], tools["reset_password"]["directCall"]) == (True, True)


# -- bound to a session: parked until decided ----------------------------------------------

@transactional
def test_a_session_bound_call_parks_and_approving_runs_it_exactly_once(alice, ledger, sync_turns):
    session_id, _ = start(alice)
    before = len(read_events(session_id))

    parked = park(alice, session_id)

    call_id = parked["callId"]
    turn = Turn.objects.get(session_id=session_id, trigger=Turn.Trigger.TOOL)
    assert parked == {"callId": call_id, "toolName": "close_account", "input": {"account": "acc-1"},
                      "status": "awaiting_approval", "sessionId": session_id, "turnId": turn.id}
    assert runs(ledger) == []
    assert types_after(session_id, before) == ["actions.requested", "action.approval_requested"]
    requested = read_events(session_id)[-1]
    assert requested["data"]["callId"] == call_id and requested["data"]["direct"] is True
    listed = alice.get(f"/desk/v1/session/{session_id}/approvals").json()["approvals"]
    assert [(a["callId"], a["status"]) for a in listed] == [(call_id, "awaiting_approval")]
    assert Session.objects.get(pk=session_id).active_turn_id == turn.id

    approved = decide(alice, session_id, call_id, "approve")

    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "approved"
    assert runs(ledger) == ["acc-1"]
    assert types_after(session_id, before) == [
        "actions.requested", "action.approval_requested", "action.approval_resolved", "action.result"]
    result = read_events(session_id)[-1]["data"]
    assert result["callId"] == call_id and result["output"] == {"done": "acc-1"}
    assert ToolCall.objects.get(call_id=call_id).status == ToolCall.Status.DONE
    assert Turn.objects.get(pk=turn.id).status == Turn.Status.COMPLETED
    assert Session.objects.get(pk=session_id).active_turn_id is None

    again = decide(alice, session_id, call_id, "approve")
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_resolved"
    assert runs(ledger) == ["acc-1"]


@transactional
def test_denying_a_parked_call_reports_it_denied_and_frees_the_session(alice, ledger, sync_turns):
    session_id, _ = start(alice)
    call_id = park(alice, session_id)["callId"]

    denied = decide(alice, session_id, call_id, "deny", "not today")

    assert denied.status_code == 200 and denied.json()["status"] == "denied"
    result = read_events(session_id)[-1]
    assert result["type"] == "action.result" and result["data"]["error"] == "denied by alice: not today"
    assert runs(ledger) == []
    assert Session.objects.get(pk=session_id).active_turn_id is None
    assert post_json(alice, f"/desk/v1/session/{session_id}/message", {"message": "next"}).status_code == 202


@transactional
def test_bob_cannot_decide_alices_parked_call(alice, bob, ledger, sync_turns):
    session_id, _ = start(alice)
    call_id = park(alice, session_id)["callId"]

    assert decide(bob, session_id, call_id, "approve").status_code == 403
    assert runs(ledger) == []
    assert ToolCall.objects.get(call_id=call_id).status == ToolCall.Status.AWAITING_APPROVAL


@transactional
def test_while_parked_the_session_is_busy_for_other_direct_calls(alice, ledger, sync_turns):
    session_id, _ = start(alice)
    park(alice, session_id)

    busy = post_json(alice, RESET, {"input": {"account": "acc-2"}, "sessionId": session_id})

    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
    assert runs(ledger) == []


@transactional
def test_a_preempting_follow_up_while_parked_ends_the_call_unrun_then_runs(alice, ledger, sync_turns):
    """As with a turn's parked call: the default admission interrupts it, so the session never stays wedged."""
    session_id, token = start(alice)
    call_id = park(alice, session_id)["callId"]
    before = len(read_events(session_id))

    follow = post_json(alice, f"/desk/v1/session/{session_id}/message", {"message": "never mind", "continuationToken": token})

    assert follow.status_code == 202, follow.content
    found = read_events(session_id)[before:]
    assert found[0]["type"] == "action.result"
    assert found[0]["data"] == {**found[0]["data"], "callId": call_id, "error": "not run: turn interrupted"}
    assert [e["type"] for e in found][1] == "message.received" and found[1]["data"]["text"] == "never mind"
    assert [e["type"] for e in found][-2:] == ["turn.completed", "session.waiting"]
    assert ToolCall.objects.get(call_id=call_id).status == ToolCall.Status.INTERRUPTED
    late = decide(alice, session_id, call_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "already_resolved"
    assert runs(ledger) == []


@transactional
def test_a_coalescing_follow_up_waits_for_the_decision(alice, ledger, sync_turns):
    session_id, token = start(alice)
    call_id = park(alice, session_id)["callId"]
    before = len(read_events(session_id))

    follow = post_json(alice, f"/desk/v1/session/{session_id}/message",
                       {"message": "after that", "continuationToken": token, "admission": "coalesce"})

    assert follow.status_code == 202, follow.content
    assert read_events(session_id)[before:] == [], "the follow-up queues behind the parked call"
    assert decide(alice, session_id, call_id, "approve").status_code == 200
    found = [e["type"] for e in read_events(session_id)[before:]]
    assert found[:3] == ["action.approval_resolved", "action.result", "message.received"]
    assert found[-2:] == ["turn.completed", "session.waiting"]
    assert runs(ledger) == ["acc-1"]


@transactional
def test_stop_while_parked_ends_the_call_unrun_and_frees_the_session(alice, ledger, sync_turns):
    session_id, _ = start(alice)
    call_id = park(alice, session_id)["callId"]

    stopped = alice.post(f"/desk/v1/session/{session_id}/stop")

    assert stopped.status_code == 202, stopped.content
    result = read_events(session_id)[-1]
    assert result["type"] == "action.result" and result["data"]["error"] == "not run: turn interrupted"
    assert Session.objects.get(pk=session_id).active_turn_id is None
    assert alice.post(f"/desk/v1/session/{session_id}/stop").status_code == 409
    assert decide(alice, session_id, call_id, "approve").status_code == 409
    assert runs(ledger) == []


@transactional
def test_a_dry_run_session_stubs_a_gated_write_without_asking(alice, ledger, sync_turns):
    """As in a turn: a stub has no effect, so it needs no approval."""
    session_id, _ = start(alice, dryRun=True)

    response = post_json(alice, CLOSE, {"input": {"account": "acc-1"}, "sessionId": session_id})

    assert response.status_code == 200, response.content
    assert response.json()["stubbed"] is True
    assert runs(ledger) == []


# -- manage.py call ------------------------------------------------------------------------

def call(*args: str) -> dict:
    out = StringIO()
    call_command("call", *args, stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


@transactional
def test_the_call_command_refuses_a_gated_tool_and_names_the_way_out(ledger):
    with pytest.raises(CommandError) as raised:
        call("desk", "close_account", "--input", '{"account": "acc-1"}')

    assert "approval_required" in str(raised.value) and "--approve" in str(raised.value)
    assert runs(ledger) == []


@transactional
def test_the_call_command_runs_a_gated_tool_with_approve(ledger):
    result = call("desk", "close_account", "--input", '{"account": "acc-1"}', "--approve")

    assert result["output"] == {"done": "acc-1"}
    assert runs(ledger) == ["acc-1"]


@transactional
def test_the_call_command_parks_on_a_session_and_approve_records_the_operator(alice, ledger, sync_turns):
    session_id, _ = start(alice)

    parked = call("desk", "close_account", "--input", '{"account": "acc-1"}', "--session", session_id)
    assert parked["status"] == "awaiting_approval" and runs(ledger) == []
    assert decide(alice, session_id, parked["callId"], "deny").status_code == 200

    before = len(read_events(session_id))
    ran = call("desk", "close_account", "--input", '{"account": "acc-2"}', "--session", session_id, "--approve")

    assert ran["output"] == {"done": "acc-2"} and runs(ledger) == ["acc-2"]
    assert types_after(session_id, before) == ["actions.requested", "action.approval_resolved", "action.result"]
    resolved = read_events(session_id)[before + 1]["data"]
    assert resolved["decision"] == "approve" and resolved["decidedBy"]["authenticator"] == "cli"
    assert ToolCall.objects.get(call_id=ran["callId"]).decided_by["principalType"] == "operator"


@transactional
def test_an_approved_call_whose_worker_died_is_reported_and_leaves_the_conversation_alone(alice, ledger, sync_turns):
    session_id, _ = start(alice)
    call_id = park(alice, session_id)["callId"]
    conversation = Session.objects.get(pk=session_id).conversation
    # What a worker leaves behind when it dies while running the approved call.
    ToolCall.objects.filter(call_id=call_id).update(status=ToolCall.Status.RUNNING)
    Turn.objects.filter(trigger=Turn.Trigger.TOOL).update(
        status=Turn.Status.RUNNING, claimed_by="gone-host:4242", lease_until=timezone.now() - timedelta(seconds=1))

    assert sweep() == 1

    session = Session.objects.get(pk=session_id)
    assert session.active_turn_id is None
    assert session.conversation == conversation, "a direct call is no model input"
    assert ToolCall.objects.get(call_id=call_id).status == ToolCall.Status.INTERRUPTED
