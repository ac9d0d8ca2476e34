"""Per-stage timings of a turn: measured where each stage happens, stored on the
Turn with its end, sent as `timings` in `turn.completed` / `turn.failed` and as
`lastTurn` in the session detail.

Durations come from the scripted model's `/sleep` and from tools that sleep,
so each test asserts lower bounds (never tight upper ones: a busy machine
only makes a stage longer). Turns run in-process through django-q2's sync mode.
"""
from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from sessions.turn.engine import run_turn
from sessions.eventlog.events import read_events
from sessions.models import Session, Turn
from sessions.turn.recovery import sweep
from tests.sessions.test_hooks import GATED_TOOL

transactional = pytest.mark.django_db(transaction=True)

SLOW_TOOL = '''\
import time
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    ms: int


@tool(description="Wait a while.", effect="read")
def slow(input: Input, ctx) -> str:
    time.sleep(input.ms / 1000)
    return f"waited {input.ms} ms"
'''


TOTALS = ("queueMs", "loadMs", "workspaceMs", "modelMs", "toolsMs", "approvalMs", "settleMs", "totalMs")


@pytest.fixture
def timed(db, tmp_path: Path):
    """An agent with a tool that sleeps and a tool that needs approval."""
    root = tmp_path / "timed"
    tools = root / "agent" / "tools"
    tools.mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You do as told.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (tools / "slow.py").write_text(SLOW_TOOL)
    (tools / "send_payment.py").write_text(GATED_TOOL)
    deploy_agent_folder(root)


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str) -> str:
    return started(client, message)["sessionId"]


def started(client, message: str) -> dict:
    response = post_json(client, "/timed/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()


def ending(session_id: str, type_: str) -> dict:
    [data] = [e["data"] for e in read_events(session_id) if e["type"] == type_]
    return data


def assert_consistent(timings: dict) -> None:
    """What holds of every turn's timings: stages within the whole, steps in order, totals from steps."""
    for key in TOTALS:
        assert timings[key] >= 0, key
    assert timings["totalMs"] >= timings["modelMs"] + timings["toolsMs"] + timings["approvalMs"]
    steps = timings["steps"]
    starts = [s["startMs"] for s in steps]
    assert starts == sorted(starts), "steps come in the order they started"
    assert steps[0]["kind"] == "queue" and steps[0]["startMs"] == 0
    assert steps[-1]["kind"] == "settle"
    for step in steps:
        assert step["startMs"] >= 0 and step["durationMs"] >= 0
        assert step["startMs"] + step["durationMs"] <= timings["totalMs"] + 1, step
    for kind, key in (("queue", "queueMs"), ("load", "loadMs"), ("workspace", "workspaceMs"), ("model", "modelMs"),
                      ("approval", "approvalMs"), ("settle", "settleMs")):
        assert timings[key] == pytest.approx(sum(s["durationMs"] for s in steps if s["kind"] == kind), abs=0.5), kind


@transactional
def test_a_turn_with_a_tool_call_and_an_approval_reports_where_its_time_went(alice, timed, sync_turns):
    session_id = start(alice, '/sleep 120\n/call slow {"ms": 150}\n/call send_payment {"amount": 5}')
    turn = Turn.objects.get(session_id=session_id)
    assert turn.status == Turn.Status.AWAITING_APPROVAL and turn.timings is None
    call_id = next(e["data"]["callId"] for e in read_events(session_id) if e["type"] == "action.approval_requested")

    waited = 0.3
    time.sleep(waited)
    decided = post_json(alice, f"/timed/v1/session/{session_id}/approvals/{call_id}", {"decision": "approve"})
    assert decided.status_code == 200, decided.content

    completed = ending(session_id, "turn.completed")
    timings = completed["timings"]
    assert completed["usage"]["outputTokens"] > 0 and completed["durationMs"] > 0, "existing fields unchanged"
    assert_consistent(timings)
    assert [s["kind"] for s in timings["steps"]] == [
        "queue", "load", "workspace", "model", "tool", "approval", "queue", "load", "workspace", "tool", "model",
        "settle"]
    first_model, slow, approval, payment, second_model = (timings["steps"][i] for i in (3, 4, 5, 9, 10))

    assert first_model["name"] == "scripted:echo" and first_model["durationMs"] >= 120
    assert first_model["firstTokenMs"] >= 120, "the model said nothing before its sleep ended"
    assert timings["firstTokenMs"] == first_model["firstTokenMs"]
    assert timings["modelMs"] >= 120
    assert second_model["startMs"] >= payment["startMs"] + payment["durationMs"]

    assert (slow["name"], slow["callId"]) == ("slow", slow["callId"]) and slow["durationMs"] >= 150
    assert slow["startMs"] >= first_model["startMs"] + first_model["durationMs"]
    assert payment["name"] == "send_payment" and payment["callId"] == call_id
    assert timings["toolsMs"] >= slow["durationMs"] + payment["durationMs"] - 0.2

    assert approval["name"] == "send_payment"
    assert approval["durationMs"] >= waited * 1000, "the wait for the decision is recorded"
    assert timings["approvalMs"] == approval["durationMs"]
    assert approval["startMs"] >= slow["startMs"] + slow["durationMs"], "parked once the step's other calls ran"
    assert timings["modelMs"] < timings["totalMs"] - timings["approvalMs"], "the wait is not model time"
    assert timings["totalMs"] >= 120 + 150 + waited * 1000

    turn.refresh_from_db()
    assert turn.status == Turn.Status.COMPLETED and turn.timings == timings, "stored with the turn's end"
    assert "timings" not in turn.state


@transactional
def test_a_failed_turn_reports_its_timings_too(alice, timed, sync_turns):
    session_id = start(alice, "/sleep 80\n/fail the model is down")
    failed = ending(session_id, "turn.failed")
    assert failed["error"] == "the model is down" and failed["code"] == "scripted_failure"
    timings = failed["timings"]
    assert_consistent(timings)
    assert [s["kind"] for s in timings["steps"]] == ["queue", "load", "workspace", "model", "settle"]
    model = timings["steps"][3]
    assert model["durationMs"] >= 80 and model["firstTokenMs"] is None, "it failed before saying anything"
    assert timings["firstTokenMs"] is None and timings["toolsMs"] == 0 and timings["approvalMs"] == 0
    assert Turn.objects.get(session_id=session_id).timings == timings


@transactional
def test_a_turn_interrupted_while_parked_records_the_wait(alice, timed, sync_turns):
    session_id = start(alice, '/call send_payment {"amount": 5}')
    time.sleep(0.15)
    assert post_json(alice, f"/timed/v1/session/{session_id}/stop", {}).status_code == 202
    failed = ending(session_id, "turn.failed")
    assert failed["error"] == "turn interrupted"
    timings = failed["timings"]
    assert_consistent(timings)
    assert [s["kind"] for s in timings["steps"]] == [
        "queue", "load", "workspace", "model", "approval", "load", "workspace", "settle"]
    assert timings["approvalMs"] >= 150 and timings["steps"][4]["name"] == "send_payment"


@transactional
def test_the_session_detail_shows_the_last_turn_with_its_timings(alice, timed, sync_turns):
    created = started(alice, "/sleep 30\nhello")
    session_id = created["sessionId"]
    detail = alice.get(f"/timed/v1/session/{session_id}")
    assert detail.status_code == 200
    turn = Turn.objects.get(session_id=session_id)
    last = detail.json()["lastTurn"]
    assert last == {"id": turn.id, "status": "completed", "timings": turn.timings, "traceId": None}
    assert last["timings"]["modelMs"] >= 30

    follow = post_json(alice, f"/timed/v1/session/{session_id}/message", {
        "message": '/call send_payment {"amount": 1}',
        "continuationToken": created["continuationToken"]})
    assert follow.status_code == 202, follow.content
    last = alice.get(f"/timed/v1/session/{session_id}").json()["lastTurn"]
    assert last["id"] == follow.json()["turnId"] and last["status"] == "awaiting_approval"
    assert last["timings"] is None, "timings come with the turn's end"


@transactional
def test_a_lost_turn_reports_what_is_known_of_its_timings(alice, timed, sync_turns):
    session_id = start(alice, "hello")
    session = Session.objects.get(pk=session_id)
    created = timezone.now() - timedelta(seconds=5)
    turn = Turn.objects.create(session=session, status=Turn.Status.RUNNING, message="long", created_at=created,
                               claimed_by="gone-host:4242", started_at=created + timedelta(seconds=1),
                               lease_until=timezone.now() - timedelta(seconds=1))
    Session.objects.filter(pk=session.pk).update(active_turn=turn, status=Session.Status.RUNNING)
    assert sweep() == 1
    timings = [e for e in read_events(session_id) if e["type"] == "turn.failed"][-1]["data"]["timings"]
    assert timings["queueMs"] == pytest.approx(1000, abs=1) and timings["totalMs"] >= 5000
    assert timings["modelMs"] is None and timings["toolsMs"] is None, "what its worker measured went with it"
    assert [s["kind"] for s in timings["steps"]] == ["queue"]
    turn.refresh_from_db()
    assert turn.timings == timings


@transactional
def test_a_workspace_that_cannot_be_built_is_timed_in_the_failed_turn(alice, tmp_path, sync_turns):
    root = tmp_path / "broken"
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You work in your workspace.\n")
    (root / "agent" / "agent.py").write_text(
        "import time\nfrom agents.sdk import Agent, virtual_runtime\n\n"
        "def workspace(ctx):\n    time.sleep(0.1)\n    raise RuntimeError('no disk today')\n\n"
        "agent = Agent(runtime=virtual_runtime(workspace))\n")
    deploy_agent_folder(root)
    response = post_json(alice, "/broken/v1/session", {"message": "hello"})
    assert response.status_code == 201, response.content
    failed = ending(response.json()["sessionId"], "turn.failed")
    assert failed["code"] == "workspace_error"
    timings = failed["timings"]
    assert_consistent(timings)
    assert [s["kind"] for s in timings["steps"]] == ["queue", "load", "workspace", "settle"]
    assert timings["workspaceMs"] >= 100 and timings["modelMs"] == 0 and timings["firstTokenMs"] is None


@pytest.mark.django_db
def test_the_openapi_document_describes_last_turn_and_its_timings(local):
    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    schemas = document["components"]["schemas"]
    detail = document["paths"]["/{slug}/v1/session/{session_id}"]["get"]["responses"]["200"]
    body = schemas[detail["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]
    assert "lastTurn" in body["properties"] and "lastTurn" in body["required"]
    last_turn = schemas["LastTurn"]
    assert set(last_turn["properties"]) == {"id", "status", "timings", "traceId"}
    timings = schemas["TurnTimings"]["properties"]
    assert set(TOTALS) | {"firstTokenMs", "runtimeMs", "steps"} <= set(timings)
    kind = schemas["TimingStep"]["properties"]["kind"]["allOf"][0]["$ref"].rsplit("/", 1)[1]
    assert set(schemas[kind]["enum"]) == {"queue", "load", "workspace", "runtime", "model", "tool", "approval",
                                          "settle"}


@transactional
def test_a_follow_up_queued_behind_a_turn_counts_its_wait_as_queue_time(alice, timed):
    # No sync_turns: each task waits in django-q's queue until run here, as it would for a busy worker.
    created = started(alice, "first")
    session_id = created["sessionId"]
    follow = post_json(alice, f"/timed/v1/session/{session_id}/message", {
        "message": "/sleep 50\nsecond", "continuationToken": created["continuationToken"], "admission": "coalesce"})
    assert follow.status_code == 202, follow.content
    time.sleep(0.2)
    run_turn(created["turnId"])
    run_turn(follow.json()["turnId"])

    first, second = [e["data"]["timings"] for e in read_events(session_id) if e["type"] == "turn.completed"]
    assert first["queueMs"] >= 200 and second["queueMs"] >= 200, "created, then waited for a worker"
    assert second["modelMs"] >= 50 and second["firstTokenMs"] >= 50
    for timings in (first, second):
        assert_consistent(timings)
        assert timings["totalMs"] >= timings["queueMs"] + timings["modelMs"]
