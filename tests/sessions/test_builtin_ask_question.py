"""The `ask_question` built-in (`Agent(builtins=["ask_question"])`): the model's question parks the
turn like a call for approval; the person's answer (`POST …/questions/<callId>`) is the call's result
and the turn goes on. Answering is admitted like deciding an approval (the owner, an operator; not
another member, a token scoped elsewhere or nobody); a Stop while it waits ends the turn cleanly;
retention spares the session; and the question survives a kill -9 of the whole server.
"""
from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import PersonalToken, Session, ToolCall, Turn
from sessions.principal import Principal
from sessions.retention.sweep import apply_retention
from tests.channels_app.roles_support import acted, anonymous, people, person, start_as  # noqa: F401
from sessions.turn.admission import AdmissionError
from sessions.turn.approvals import answer_question
from tests.sessions.test_approvals import GATED_TOOL, PAY_5, assert_no_dangling_tool_calls, squeeze
from tests.support import read_stream_until, run_server

transactional = pytest.mark.django_db(transaction=True)
LOCAL = Principal(authenticator="local", principal_id="local", principal_type="user")

ASK = {"question": "Which carrier should I use?", "options": ["UPS", "DHL"]}
ASKING = f"/call ask_question {json.dumps(ASK)}"
PARKED = [
    "session.started", "agent.bound", "message.received", "turn.started", "step.started", "step.completed",
    "actions.requested", "action.approval_requested",
]
RESUMED = ["action.approval_resolved", "action.result", "step.started", "message.appended", "message.completed",
           "step.completed", "turn.completed", "session.waiting"]


def write_asker(root: Path) -> Path:
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "tools" / "send_payment.py").write_text(GATED_TOOL.format(path=str(root / "ledger.txt")))
    (root / "agent" / "instructions.md").write_text("Ask when unsure.\n")
    (root / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\n"
        "agent = Agent(model='scripted:echo', tools=[], builtins=['ask_question', 'todos'])\n")
    return root


@pytest.fixture
def asker(db, tmp_path):
    return deploy_agent_folder(write_asker(tmp_path / "asker")).agent


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str = ASKING) -> str:
    created = post_json(client, "/asker/v1/session", {"message": message})
    assert created.status_code == 201, created.content
    return created.json()["sessionId"]


def answer(client, session_id: str, call_id: str, text: str):
    return post_json(client, f"/asker/v1/session/{session_id}/questions/{call_id}", {"answer": text})


def asked(session_id: str) -> dict:
    [found] = [e["data"] for e in read_events(session_id) if e["type"] == "action.approval_requested"]
    return found


@transactional
def test_a_question_parks_the_turn_and_the_answer_is_the_calls_result(local, asker, sync_turns):
    session_id = start(local)

    assert squeeze([e["type"] for e in read_events(session_id)]) == PARKED
    question = asked(session_id)
    assert (question["kind"], question["question"], question["options"]) == ("question", ASK["question"], ["UPS", "DHL"])
    assert question["toolName"] == "ask_question" and question["input"] == ASK
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.AWAITING_APPROVAL
    assert Session.objects.get(pk=session_id).status == Session.Status.AWAITING_APPROVAL
    [pending] = local.get(f"/asker/v1/session/{session_id}/approvals").json()["approvals"]
    assert (pending["kind"], pending["callId"], pending["input"]) == ("question", question["callId"], ASK)

    # Deciding it as an approval is refused, and points at the question's route.
    approve = post_json(local, f"/asker/v1/session/{session_id}/approvals/{question['callId']}", {"decision": "approve"})
    assert approve.status_code == 409 and approve.json()["error"]["code"] == "is_question"
    assert "/questions/" in approve.json()["error"]["message"]

    answered = answer(local, session_id, question["callId"], "  DHL, it is faster  ")
    assert answered.status_code == 200, answered.content
    body = answered.json()
    assert (body["status"], body["answer"], body["question"], body["options"]) == (
        "answered", "DHL, it is faster", ASK["question"], ["UPS", "DHL"])
    assert body["answeredBy"]["principalId"] == "local" and body["answeredAt"] and body["askedAt"]

    found = read_events(session_id)
    assert squeeze([e["type"] for e in found]) == PARKED + RESUMED
    resolved = [e["data"] for e in found if e["type"] == "action.approval_resolved"][0]
    assert (resolved["decision"], resolved["answer"], resolved["callId"]) == ("answer", "DHL, it is faster",
                                                                             question["callId"])
    [result] = [e["data"] for e in found if e["type"] == "action.result"]
    assert result["output"] == "DHL, it is faster" and "error" not in result
    assert [e["data"]["text"] for e in found if e["type"] == "message.completed"][-1] == (
        "Tool results:\nask_question (ok): DHL, it is faster")
    assert len({e["turnId"] for e in found[2:]}) == 1, "the resumed run is the same turn"
    assert Session.objects.get(pk=session_id).status == Session.Status.WAITING
    assert acted(session_id) == [], "the owner's own answer is no operator's act"
    assert_no_dangling_tool_calls(session_id)

    again = answer(local, session_id, question["callId"], "UPS")
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_resolved"


@transactional
def test_refusals_name_the_problem(local, asker, sync_turns):
    session_id = start(local)
    call_id = asked(session_id)["callId"]
    base = f"/asker/v1/session/{session_id}/questions"

    assert answer(local, session_id, "call_nope", "x").json()["error"]["code"] == "approval_not_found"
    for body in ({"answer": "   "}, {"answer": ""}, {}, {"answer": 3}, {"answer": "x", "extra": 1}):
        refused = post_json(local, f"{base}/{call_id}", body)
        assert refused.status_code == 400, (body, refused.content)
        assert refused.json()["error"]["code"] in ("invalid_request", "invalid_text"), refused.content
    assert post_json(local, f"{base}/{call_id}", {"answer": "x" * 4001}).status_code == 400
    # Every door's answer passes one check: what HTTP's body refuses, the other doors' is refused too.
    session = Session.objects.get(pk=session_id)
    for bad in ("\ufeff \n", "x" * 4001, "a\x00b", 7):
        with pytest.raises(AdmissionError) as refused:
            answer_question(session, call_id, bad, LOCAL)
        assert (refused.value.status, refused.value.code) == (400, "invalid_answer"), bad
    assert ToolCall.objects.get(session_id=session_id, call_id=call_id).status == ToolCall.Status.AWAITING_APPROVAL

    # A call waiting for approval is not a question, and a question is not approved.
    gated = start(local, PAY_5)
    gated_call = asked(gated)["callId"]
    wrong = answer(local, gated, gated_call, "x")
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "not_a_question"
    assert ToolCall.objects.get(session_id=gated, call_id=gated_call).status == ToolCall.Status.AWAITING_APPROVAL


@transactional
def test_who_may_answer_the_owner_and_operators_only(people, asker, sync_turns):  # noqa: F811
    session_id = start_as(people.mia.client, "asker", ASKING)
    call_id = asked(session_id)["callId"]
    _, elsewhere = PersonalToken.issue(person("ops", operator=True).user, "elsewhere", agents=["support"])
    scoped_elsewhere = type(people.mia)(people.olga.user, elsewhere).client

    assert answer(anonymous(), session_id, call_id, "UPS").status_code == 401
    assert answer(people.max.client, session_id, call_id, "UPS").status_code == 403
    assert answer(scoped_elsewhere, session_id, call_id, "UPS").status_code == 403
    assert ToolCall.objects.get(session_id=session_id, call_id=call_id).status == ToolCall.Status.AWAITING_APPROVAL

    answered = answer(people.olga.client, session_id, call_id, "UPS")
    assert answered.status_code == 200, answered.content
    assert answered.json()["answeredBy"]["principalId"] == "olga"
    assert acted(session_id) == [{"operator": "olga", "action": "answer", "callId": call_id}]
    assert [e["data"]["output"] for e in read_events(session_id) if e["type"] == "action.result"] == ["UPS"]

    own = start_as(people.mia.client, "asker", ASKING)
    assert answer(people.mia.client, own, asked(own)["callId"], "DHL").status_code == 200
    assert acted(own) == []


@transactional
def test_stop_while_waiting_ends_the_turn_and_the_question_goes_unanswered(local, asker, sync_turns):
    session_id = start(local)
    call_id = asked(session_id)["callId"]

    assert local.post(f"/asker/v1/session/{session_id}/stop").status_code == 202
    found = read_events(session_id)
    assert squeeze([e["type"] for e in found]) == PARKED + ["action.result", "turn.failed", "session.waiting"]
    [result] = [e["data"] for e in found if e["type"] == "action.result"]
    assert result["callId"] == call_id and result["error"] == "not run: turn interrupted"
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.INTERRUPTED
    late = answer(local, session_id, call_id, "UPS")
    assert late.status_code == 409 and late.json()["error"]["code"] == "already_resolved"
    assert_no_dangling_tool_calls(session_id)

    # The next message runs as usual.
    follow = post_json(local, f"/asker/v1/session/{session_id}/message", {"message": "hello"})
    assert follow.status_code == 202
    assert [e["data"]["text"] for e in read_events(session_id) if e["type"] == "message.completed"][-1] == (
        "You said: hello")


@transactional
def test_retention_spares_a_session_waiting_on_a_question(local, asker, sync_turns, settings):
    settings.AGENTSITE_RETENTION_DAYS = 1
    waiting, idle = start(local), start(local, "hello")

    done = apply_retention(now=timezone.now() + timedelta(days=3))
    assert [s.session_id for s in done.deleted] == [idle]
    assert [s.session_id for s in done.spared] == [waiting]
    assert list(Session.objects.values_list("pk", flat=True)) == [waiting]
    assert answer(local, waiting, asked(waiting)["callId"], "UPS").status_code == 200


def test_a_question_survives_a_kill_9_of_the_server_and_its_answer_resumes_the_turn(tmp_path):
    agents, state = tmp_path / "agents", tmp_path / "state"
    write_asker(agents / "asker")
    args = ("--agents", str(agents), "--no-examples")

    with run_server(state, *args) as server, server.client() as client:
        created = client.post("/asker/v1/session", json={"message": ASKING})
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        before = read_stream_until(client, f"/asker/v1/session/{session_id}/stream", "action.approval_requested")
        call_id = before[-1]["data"]["callId"]
        serve = psutil.Process(server.process.pid)
        tree = [serve, *serve.children(recursive=True)]
        assert len(tree) > 1, "serve runs its workers as child processes"
        for process in tree:
            os.kill(process.pid, signal.SIGKILL)
        server.process.wait(timeout=20)
        psutil.wait_procs(tree, timeout=20)

    with run_server(state, *args) as server, server.client() as client:
        [pending] = client.get(f"/asker/v1/session/{session_id}/approvals").json()["approvals"]
        assert (pending["callId"], pending["kind"], pending["status"]) == (call_id, "question", "awaiting_approval")
        # Two people answer at once: one answer wins, the other is told it was answered.
        url = f"{server.base_url}/asker/v1/session/{session_id}/questions/{call_id}"
        with ThreadPoolExecutor(2) as pool:
            racing = list(pool.map(lambda text: httpx.post(url, json={"answer": text}, timeout=20), ["UPS", "DHL"]))
        assert sorted(r.status_code for r in racing) == [200, 409], [r.text for r in racing]
        winner = next(r.json()["answer"] for r in racing if r.status_code == 200)
        found = read_stream_until(client, f"/asker/v1/session/{session_id}/stream", "session.waiting")
        assert [e["index"] for e in found] == list(range(len(found)))
        assert squeeze([e["type"] for e in found]) == PARKED + RESUMED
        assert [e["data"]["output"] for e in found if e["type"] == "action.result"] == [winner]
        assert [e["data"]["answer"] for e in found if e["type"] == "action.approval_resolved"] == [winner]
        assert len({e["turnId"] for e in found if e["turnId"]}) == 1, "one turn, resumed"


@transactional
def test_the_admins_approve_action_leaves_a_question_waiting_and_says_why(local, asker, sync_turns):
    from django.contrib.auth import get_user_model
    from django.test import Client

    session_id = start(local)
    call = ToolCall.objects.get(session_id=session_id)
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("ops", "ops@example.com", "not-used"))

    response = operator.post("/admin/agent_sessions/toolcall/", {"action": "approve", "_selected_action": [call.pk]},
                             follow=True)

    assert response.status_code == 200
    said = [str(m) for m in response.context["messages"]]
    assert said[0] == "Approved 0 parked call(s)." and said[1].startswith("Left 1 question(s)")
    call.refresh_from_db()
    assert call.status == ToolCall.Status.AWAITING_APPROVAL
