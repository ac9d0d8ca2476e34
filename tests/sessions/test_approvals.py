"""Approval-gated tool calls: a call to a `needs_approval` tool parks the turn
until someone decides; approving runs it exactly once and the turn goes on,
denying hands the model the denial. Most tests run turns in-process through
django-q2's sync mode; the restart test uses real `manage.py serve` processes.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall, Turn
from tests.support import read_stream_until, run_server

transactional = pytest.mark.django_db(transaction=True)

# Each call appends a line to a file, so "ran exactly once" is countable from any process.
GATED_TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    amount: int


@tool(description="Send a payment.", effect="write", needs_approval=True)
def send_payment(input: Input, ctx) -> dict:
    with open({path!r}, "a") as f:
        f.write(f"{{input.amount}}\\n")
    return {{"sent": input.amount}}
'''

PLAIN_TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    note: str


@tool(description="Write a note.", effect="read")
def note(input: Input, ctx) -> str:
    with open({path!r}, "a") as f:
        f.write(input.note + "\\n")
    return "noted " + input.note
'''

PAY_5 = '/call send_payment {"amount": 5}'


def write_gated_agent(root: Path, ledger: Path, notes: Path) -> Path:
    tools = root / "agent" / "tools"
    tools.mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You send payments when asked.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (tools / "send_payment.py").write_text(GATED_TOOL.format(path=str(ledger)))
    (tools / "note.py").write_text(PLAIN_TOOL.format(path=str(notes)))
    return root


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def gated(db, tmp_path):
    """The `gated` agent deployed; its ledger and notes files count tool runs."""
    ledger, notes = tmp_path / "ledger.txt", tmp_path / "notes.txt"
    deploy_agent_folder(write_gated_agent(tmp_path / "gated", ledger, notes))
    return ledger, notes


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str) -> tuple[str, str]:
    response = post_json(client, "/gated/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"], response.json()["continuationToken"]


def decide(client, session_id: str, call_id: str, decision: str, reason: str = ""):
    return post_json(client, f"/gated/v1/session/{session_id}/approvals/{call_id}",
                     {"decision": decision, "reason": reason})


def events(session_id: str) -> list[dict]:
    found = read_events(session_id)
    assert [e["index"] for e in found] == list(range(len(found))), "indexes must be contiguous from 0"
    return found


def squeeze(types: list[str]) -> list[str]:
    out: list[str] = []
    for t in types:
        if not (out and t == out[-1] and t.endswith(".appended")):
            out.append(t)
    return out


def types_of(found: list[dict]) -> list[str]:
    return squeeze([e["type"] for e in found])


def only(found: list[dict], type_: str) -> dict:
    matching = [e for e in found if e["type"] == type_]
    assert len(matching) == 1, f"expected one {type_}, got {len(matching)}"
    return matching[0]["data"]


def reply(found: list[dict]) -> str:
    return [e for e in found if e["type"] == "message.completed"][-1]["data"]["text"]


def assert_no_dangling_tool_calls(session_id: str) -> None:
    """Every tool call in the stored conversation has its result, or real providers refuse the next turn."""
    conversation = Session.objects.get(pk=session_id).conversation
    asked = [c["id"] for m in conversation if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    answered = [m["callId"] for m in conversation if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered)


PARKED = [
    "session.started", "agent.bound", "message.received", "turn.started", "step.started", "step.completed",
    "actions.requested", "action.approval_requested",
]


@transactional
def test_a_gated_call_parks_the_turn_and_approving_runs_it_once(alice, gated, sync_turns):
    ledger, _ = gated
    session_id, _ = start(alice, PAY_5)

    parked = events(session_id)
    assert types_of(parked) == PARKED
    requested = only(parked, "action.approval_requested")
    assert (requested["toolName"], requested["input"], requested["effect"]) == ("send_payment", {"amount": 5}, "write")
    assert requested["callId"] == only(parked, "actions.requested")["calls"][0]["callId"]
    turn = Turn.objects.get(session_id=session_id)
    assert turn.status == Turn.Status.AWAITING_APPROVAL
    assert lines(ledger) == []

    listed = alice.get(f"/gated/v1/session/{session_id}/approvals")
    assert listed.status_code == 200
    [pending] = listed.json()["approvals"]
    assert pending["callId"] == requested["callId"]
    assert (pending["toolName"], pending["input"], pending["status"]) == ("send_payment", {"amount": 5}, "awaiting_approval")
    assert pending["turnId"] == turn.id and pending["decidedBy"] is None

    approved = decide(alice, session_id, requested["callId"], "approve", "looks right")
    assert approved.status_code == 200, approved.content
    body = approved.json()
    assert body["callId"] == requested["callId"] and body["status"] == "approved"
    assert body["decidedBy"]["principalId"] == "alice" and body["reason"] == "looks right"

    found = events(session_id)
    assert types_of(found) == PARKED + [
        "action.approval_resolved", "action.result",
        "step.started", "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    resolved = only(found, "action.approval_resolved")
    assert resolved["callId"] == requested["callId"] and resolved["decision"] == "approve"
    assert resolved["decidedBy"] == {"authenticator": "bearer", "principalId": "alice", "principalType": "user",
                                     "attributes": {}}
    result = only(found, "action.result")
    assert result["output"] == {"sent": 5} and result["stubbed"] is False
    assert reply(found) == 'Tool results:\nsend_payment (ok): {"sent": 5}'
    assert {e["turnId"] for e in found[2:]} == {turn.id}, "the resumed run is the same turn"

    assert lines(ledger) == ["5"]
    row = ToolCall.objects.get(turn=turn)
    assert row.status == ToolCall.Status.DONE and row.decided_by["principalId"] == "alice"
    turn.refresh_from_db()
    assert turn.status == Turn.Status.COMPLETED
    session = Session.objects.get(pk=session_id)
    assert session.status == Session.Status.WAITING and session.active_turn_id is None
    assert alice.get(f"/gated/v1/session/{session_id}/approvals").json() == {"approvals": []}
    assert_no_dangling_tool_calls(session_id)


@transactional
def test_denying_hands_the_model_the_denial_and_runs_nothing(alice, gated, sync_turns):
    ledger, _ = gated
    session_id, _ = start(alice, PAY_5)
    call_id = only(events(session_id), "action.approval_requested")["callId"]

    denied = decide(alice, session_id, call_id, "deny", "too much")
    assert denied.status_code == 200, denied.content
    assert denied.json()["status"] == "denied"

    found = events(session_id)
    assert types_of(found) == PARKED + [
        "action.approval_resolved", "action.result", "step.started", "message.appended", "message.completed",
        "step.completed", "turn.completed", "session.waiting",
    ]
    resolved = only(found, "action.approval_resolved")
    assert resolved["decision"] == "deny" and resolved["reason"] == "too much"
    assert resolved["decidedBy"]["principalId"] == "alice"
    result = only(found, "action.result")
    assert "output" not in result
    assert result["error"] == "denied by alice: too much; do not retry this call"
    assert reply(found) == "Tool results:\nsend_payment (error): denied by alice: too much; do not retry this call"
    assert lines(ledger) == []
    assert ToolCall.objects.get(call_id=call_id, session_id=session_id).status == ToolCall.Status.DENIED
    assert Session.objects.get(pk=session_id).status == Session.Status.WAITING


@transactional
def test_resolving_twice_gets_409_and_the_tool_still_ran_once(alice, gated, sync_turns):
    ledger, _ = gated
    session_id, _ = start(alice, PAY_5)
    call_id = only(events(session_id), "action.approval_requested")["callId"]
    assert decide(alice, session_id, call_id, "approve").status_code == 200
    count = len(events(session_id))

    for decision in ("approve", "deny"):
        again = decide(alice, session_id, call_id, decision)
        assert again.status_code == 409, again.content
        assert again.json()["error"]["code"] == "already_resolved"
    assert lines(ledger) == ["5"]
    assert len(events(session_id)) == count, "a refused decision records nothing"


@transactional
def test_refused_decisions_unknown_call_other_principal_and_bad_decision(alice, bob, gated, sync_turns):
    ledger, _ = gated
    session_id, _ = start(alice, PAY_5)
    call_id = only(events(session_id), "action.approval_requested")["callId"]

    unknown = decide(alice, session_id, "call_nope", "approve")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "approval_not_found"

    assert bob.get(f"/gated/v1/session/{session_id}/approvals").status_code == 403
    foreign = decide(bob, session_id, call_id, "approve")
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden"

    bad = decide(alice, session_id, call_id, "maybe")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    assert "decision" in bad.json()["error"]["message"]
    missing = post_json(alice, f"/gated/v1/session/{session_id}/approvals/{call_id}", {})
    assert missing.status_code == 400

    # None of that decided anything: the call still waits, nothing ran.
    [pending] = alice.get(f"/gated/v1/session/{session_id}/approvals").json()["approvals"]
    assert pending["callId"] == call_id and pending["status"] == "awaiting_approval"
    assert "action.approval_resolved" not in types_of(events(session_id))
    assert lines(ledger) == []


@transactional
def test_the_turn_resumes_only_once_every_parked_call_is_decided(alice, gated, sync_turns):
    ledger, notes = gated
    session_id, _ = start(alice, '/call send_payment {"amount": 1}\n/call note {"note": "hi"}\n'
                                 '/call send_payment {"amount": 2}')
    found = events(session_id)
    asked = [e["data"] for e in found if e["type"] == "action.approval_requested"]
    assert [a["input"] for a in asked] == [{"amount": 1}, {"amount": 2}]
    # The ungated call of the same step ran at once; only the gated ones wait.
    assert lines(notes) == ["hi"]
    assert only(found, "action.result")["output"] == "noted hi"

    assert decide(alice, session_id, asked[0]["callId"], "approve").status_code == 200
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.AWAITING_APPROVAL
    assert lines(ledger) == [], "nothing runs while a call of the step still waits"
    assert types_of(events(session_id))[-1] == "action.approval_resolved"

    assert decide(alice, session_id, asked[1]["callId"], "deny").status_code == 200
    found = events(session_id)
    assert lines(ledger) == ["1"] and lines(notes) == ["hi"]
    assert types_of(found)[-2:] == ["turn.completed", "session.waiting"]
    assert reply(found) == (
        "Tool results:\n"
        'send_payment (ok): {"sent": 1}\n'
        "note (ok): noted hi\n"
        "send_payment (error): denied by alice; do not retry this call"
    )
    results = [e["data"] for e in found if e["type"] == "action.result"]
    assert [r["toolName"] for r in results] == ["note", "send_payment", "send_payment"], "each call reported once"
    assert_no_dangling_tool_calls(session_id)


@transactional
def test_stop_while_parked_ends_the_turn_and_reports_the_call_not_run(alice, gated, sync_turns):
    ledger, _ = gated
    session_id, _ = start(alice, PAY_5)
    call_id = only(events(session_id), "action.approval_requested")["callId"]

    stopped = alice.post(f"/gated/v1/session/{session_id}/stop")
    assert stopped.status_code == 202, stopped.content

    found = events(session_id)
    assert types_of(found) == PARKED + ["action.result", "turn.failed", "session.waiting"]
    result = only(found, "action.result")
    assert result["callId"] == call_id and result["error"] == "not run: turn interrupted"
    assert only(found, "turn.failed")["error"] == "turn interrupted"
    assert ToolCall.objects.get(session_id=session_id, call_id=call_id).status == ToolCall.Status.INTERRUPTED
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.INTERRUPTED
    assert Session.objects.get(pk=session_id).status == Session.Status.WAITING

    late = decide(alice, session_id, call_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "already_resolved"
    assert lines(ledger) == []
    assert alice.get(f"/gated/v1/session/{session_id}/approvals").json() == {"approvals": []}
    assert_no_dangling_tool_calls(session_id)


@transactional
def test_a_preempting_follow_up_while_parked_interrupts_then_runs(alice, gated, sync_turns):
    ledger, _ = gated
    session_id, token = start(alice, PAY_5)
    call_id = only(events(session_id), "action.approval_requested")["callId"]

    follow = post_json(alice, f"/gated/v1/session/{session_id}/message", {"message": "never mind", "continuationToken": token})
    assert follow.status_code == 202, follow.content

    found = events(session_id)
    first, second = Turn.objects.filter(session_id=session_id).order_by("created_at")
    first_events = [e for e in found if e["turnId"] == first.id]
    second_events = [e for e in found if e["turnId"] == second.id]
    assert types_of(first_events)[-3:] == ["action.result", "turn.failed", "session.waiting"]
    assert first_events[-3]["data"]["callId"] == call_id
    assert first_events[-3]["data"]["error"] == "not run: turn interrupted"
    assert first_events[-2]["data"]["error"] == "turn interrupted"
    assert found.index(first_events[-1]) < found.index(second_events[0]), "the follow-up runs after the parked turn ends"
    assert types_of(second_events)[-2:] == ["turn.completed", "session.waiting"]
    assert reply(second_events) == "You said: never mind"
    assert lines(ledger) == []
    assert (first.status, second.status) == (Turn.Status.INTERRUPTED, Turn.Status.COMPLETED)
    assert_no_dangling_tool_calls(session_id)


# --- across a restart: real processes ------------------------------------------


def test_a_parked_call_survives_a_server_restart_and_runs_once_when_approved(tmp_path):
    ledger, notes = tmp_path / "ledger.txt", tmp_path / "notes.txt"
    agents = tmp_path / "agents"
    write_gated_agent(agents / "gated", ledger, notes)
    state = tmp_path / "state"
    args = ("--agents", str(agents), "--no-examples")

    with run_server(state, *args) as server, server.client() as client:
        created = client.post("/gated/v1/session", json={"message": PAY_5})
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        before = read_stream_until(client, f"/gated/v1/session/{session_id}/stream", "action.approval_requested")
        call_id = before[-1]["data"]["callId"]
        assert server.stop() == 0, server.output()
    assert lines(ledger) == []

    with run_server(state, *args) as server, server.client() as client:
        [pending] = client.get(f"/gated/v1/session/{session_id}/approvals").json()["approvals"]
        assert pending["callId"] == call_id and pending["status"] == "awaiting_approval"

        approved = client.post(f"/gated/v1/session/{session_id}/approvals/{call_id}", json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        assert approved.json()["decidedBy"]["principalId"] == "local"
        found = read_stream_until(client, f"/gated/v1/session/{session_id}/stream", "session.waiting")

        assert [e["index"] for e in found] == list(range(len(found)))
        assert squeeze([e["type"] for e in found]) == PARKED + [
            "action.approval_resolved", "action.result", "step.started",
            "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
        ]
        assert [e["data"]["output"] for e in found if e["type"] == "action.result"] == [{"sent": 5}]
        assert len({e["turnId"] for e in found if e["turnId"]}) == 1, "one turn, resumed"
        assert client.get(f"/gated/v1/session/{session_id}").json()["status"] == "waiting"
        again = client.post(f"/gated/v1/session/{session_id}/approvals/{call_id}", json={"decision": "approve"})
        assert again.status_code == 409
    assert lines(ledger) == ["5"]
