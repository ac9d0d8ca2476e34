"""Session options over HTTP: `dryRun` stubs write tools (their
`dry_run_result`, else "Operation acknowledged."), `asOf` freezes `ctx.now()`
and bounds the `time_args` of tools, with refusals the model sees."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall

transactional = pytest.mark.django_db(transaction=True)

TOOLS = {
    "refund": '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    order_id: str


@tool(description="Refund an order.", effect="write", dry_run_result={{"refunded": False, "preview": True}})
def refund(input: Input, ctx) -> dict:
    with open({path!r}, "a") as f:
        f.write("refund " + input.order_id + "\\n")
    return {{"refunded": True}}
''',
    "cancel": '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    order_id: str


@tool(description="Cancel an order.", effect="write")
def cancel(input: Input, ctx) -> dict:
    with open({path!r}, "a") as f:
        f.write("cancel " + input.order_id + "\\n")
    return {{"cancelled": True}}
''',
    "wire": '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    amount: int


@tool(description="Wire money.", effect="write", needs_approval=True)
def wire(input: Input, ctx) -> str:
    with open({path!r}, "a") as f:
        f.write("wire\\n")
    return "wired"
''',
    "lookup": '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    order_id: str


@tool(description="Look an order up.", effect="read")
def lookup(input: Input, ctx) -> dict:
    with open({path!r}, "a") as f:
        f.write("lookup " + input.order_id + "\\n")
    return {{"orderId": input.order_id, "dryRun": ctx.session.dry_run}}
''',
    "clock": '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    pass


@tool(description="What time is it?")
def clock(input: Input, ctx) -> str:
    return ctx.now().isoformat()
''',
    "history": '''\
from datetime import datetime
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    start: datetime
    end: str | None = None


@tool(description="Orders placed between two instants.", time_args=["start", "end"])
def history(input: Input, ctx) -> dict:
    return {{"start": input.start.isoformat(), "end": input.end, "now": ctx.now().isoformat()}}
''',
}


@pytest.fixture
def effects(db, tmp_path) -> Path:
    """The `shop` agent deployed; returns the file its tools log their real runs to."""
    log = tmp_path / "effects.txt"
    agent = tmp_path / "shop" / "agent"
    (agent / "tools").mkdir(parents=True)
    (agent / "instructions.md").write_text("You run a shop.\n")
    (agent / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    for name, source in TOOLS.items():
        (agent / "tools" / f"{name}.py").write_text(source.format(path=str(log)))
    deploy_agent_folder(agent.parent)
    return log


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def call(tool: str, arguments: dict) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def start(client, message: str, **options) -> str:
    response = post_json(client, "/shop/v1/session", {"message": message, **options})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def finished(session_id: str) -> list[dict]:
    found = read_events(session_id)
    assert [e["index"] for e in found] == list(range(len(found)))
    assert [e["type"] for e in found][-2:] == ["turn.completed", "session.waiting"], [e["type"] for e in found]
    return found


def results(found: list[dict]) -> dict[str, dict]:
    return {e["data"]["toolName"]: e["data"] for e in found if e["type"] == "action.result"}


def reply(found: list[dict]) -> str:
    return [e for e in found if e["type"] == "message.completed"][-1]["data"]["text"]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# --- dryRun -----------------------------------------------------------------------


@transactional
def test_a_dry_run_stubs_write_tools_and_runs_read_tools(alice, effects, sync_turns):
    session_id = start(alice, "\n".join([
        call("refund", {"order_id": "A1"}), call("cancel", {"order_id": "A2"}), call("lookup", {"order_id": "A3"}),
    ]), dryRun=True)

    found = finished(session_id)
    by_tool = results(found)
    assert by_tool["refund"]["stubbed"] is True and by_tool["refund"]["output"] == {"refunded": False, "preview": True}
    assert by_tool["cancel"]["stubbed"] is True and by_tool["cancel"]["output"] == "Operation acknowledged."
    assert by_tool["lookup"]["stubbed"] is False and by_tool["lookup"]["output"] == {"orderId": "A3", "dryRun": True}
    assert lines(effects) == ["lookup A3"], "only the read tool really ran"
    assert "cancel (ok): Operation acknowledged." in reply(found)
    assert dict(ToolCall.objects.filter(session_id=session_id).values_list("tool", "stubbed")) == {
        "refund": True, "cancel": True, "lookup": False,
    }
    assert alice.get(f"/shop/v1/session/{session_id}").json()["options"] == {"dryRun": True}
    assert found[0]["data"]["options"] == {"dryRun": True}


@transactional
def test_a_dry_run_stubs_a_gated_write_without_parking(alice, effects, sync_turns):
    session_id = start(alice, call("wire", {"amount": 100}), dryRun=True)

    found = finished(session_id)
    assert "action.approval_requested" not in {e["type"] for e in found}
    assert results(found)["wire"] == {**results(found)["wire"], "stubbed": True, "output": "Operation acknowledged."}
    assert lines(effects) == []


@transactional
def test_a_dry_run_holds_for_follow_up_turns_and_not_for_other_sessions(alice, effects, sync_turns):
    session_id = start(alice, "hello", dryRun=True)
    follow = post_json(alice, f"/shop/v1/session/{session_id}/message", {"message": call("refund", {"order_id": "B1"})})
    assert follow.status_code == 202
    assert results(finished(session_id))["refund"]["stubbed"] is True
    assert lines(effects) == []

    real = start(alice, call("refund", {"order_id": "B2"}))
    assert results(finished(real))["refund"] == {**results(finished(real))["refund"], "stubbed": False,
                                                 "output": {"refunded": True}}
    assert lines(effects) == ["refund B2"]


@transactional
def test_dry_run_must_be_a_boolean(alice, effects):
    response = post_json(alice, "/shop/v1/session", {"message": "hi", "dryRun": "yes"})

    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["field"] == "dryRun"
    assert not Session.objects.exists()


# --- asOf -------------------------------------------------------------------------

AS_OF = "2024-03-01T12:00:00+02:00"
AS_OF_UTC = datetime(2024, 3, 1, 10, 0, tzinfo=timezone.utc)


@transactional
def test_ctx_now_returns_the_as_of_instant(alice, effects, sync_turns):
    session_id = start(alice, call("clock", {}), asOf=AS_OF)

    output = results(finished(session_id))["clock"]["output"]
    assert datetime.fromisoformat(output) == AS_OF_UTC
    assert alice.get(f"/shop/v1/session/{session_id}").json()["options"] == {"asOf": AS_OF}


@transactional
def test_as_of_in_utc_with_z_is_accepted(alice, effects, sync_turns):
    session_id = start(alice, call("clock", {}), asOf="2024-03-01T10:00:00Z")

    assert datetime.fromisoformat(results(finished(session_id))["clock"]["output"]) == AS_OF_UTC


@transactional
def test_time_args_within_as_of_are_allowed(alice, effects, sync_turns):
    session_id = start(alice, call("history", {"start": "2024-02-01T00:00:00Z", "end": "2024-03-01T10:00:00Z"}),
                       asOf=AS_OF)

    output = results(finished(session_id))["history"]["output"]
    assert output["end"] == "2024-03-01T10:00:00Z"
    assert datetime.fromisoformat(output["now"]) == AS_OF_UTC


@pytest.mark.parametrize("arguments, refusal", [
    ({"start": "2024-02-01T00:00:00Z", "end": "2024-03-02T00:00:00Z"},
     "end=2024-03-02T00:00:00Z is after this session's asOf instant 2024-03-01T12:00:00+02:00; "
     "retry with bounds at or before it"),
    ({"start": "2024-02-01T00:00:00Z"},
     "end must be an absolute ISO-8601 instant with a timezone, at or before 2024-03-01T12:00:00+02:00 "
     "(this session's asOf); retry with absolute bounds"),
    ({"start": "2024-02-01T00:00:00Z", "end": "2024-02-20T00:00:00"},
     "end must be an absolute ISO-8601 instant with a timezone"),
    ({"start": "2024-02-01T00:00:00Z", "end": "last week"},
     "end must be an absolute ISO-8601 instant with a timezone"),
    ({"start": "2025-01-01T00:00:00+00:00", "end": "2024-02-20T00:00:00Z"},
     "start=2025-01-01 00:00:00+00:00 is after this session's asOf instant"),
])
@transactional
def test_time_args_that_are_unbounded_or_later_than_as_of_are_refused_to_the_model(
    alice, effects, sync_turns, arguments, refusal,
):
    session_id = start(alice, call("history", arguments), asOf=AS_OF)

    found = finished(session_id)
    result = results(found)["history"]
    assert "output" not in result and result["error"].startswith(refusal)
    assert reply(found).startswith(f"Tool results:\nhistory (error): {refusal}")
    assert ToolCall.objects.get(session_id=session_id).status == ToolCall.Status.FAILED


@transactional
def test_without_as_of_time_args_are_not_bounded(alice, effects, sync_turns):
    session_id = start(alice, call("history", {"start": "2999-01-01T00:00:00Z"}))

    output = results(finished(session_id))["history"]["output"]
    assert output["end"] is None
    assert abs((datetime.fromisoformat(output["now"]) - datetime.now(timezone.utc)).total_seconds()) < 300


@transactional
def test_as_of_holds_for_deterministic_calls_on_the_session(alice, effects, sync_turns):
    session_id = start(alice, "hello", asOf=AS_OF)

    clock = post_json(alice, "/shop/v1/tools/clock/call", {"input": {}, "sessionId": session_id})
    assert clock.status_code == 200 and datetime.fromisoformat(clock.json()["output"]) == AS_OF_UTC
    later = post_json(alice, "/shop/v1/tools/history/call",
                      {"input": {"start": "2024-05-01T00:00:00Z", "end": "2024-05-02T00:00:00Z"}, "sessionId": session_id})
    assert later.status_code == 400 and later.json()["error"]["code"] == "invalid_input"
    assert "after this session's asOf" in later.json()["error"]["message"]


@transactional
def test_dry_run_and_as_of_together(alice, effects, sync_turns):
    session_id = start(alice, "\n".join([call("clock", {}), call("refund", {"order_id": "C1"})]),
                       dryRun=True, asOf=AS_OF)

    by_tool = results(finished(session_id))
    assert datetime.fromisoformat(by_tool["clock"]["output"]) == AS_OF_UTC
    assert by_tool["refund"]["stubbed"] is True
    assert lines(effects) == []


@pytest.mark.parametrize("as_of, message", [
    ("yesterday", "asOf must be an ISO-8601 instant"),
    ("2024-03-01T12:00:00", "asOf needs a timezone"),
    ("2024-13-01T00:00:00Z", "asOf must be an ISO-8601 instant"),
    ("", "asOf must be an ISO-8601 instant"),
    (1709287200, "Input should be a valid string"),
])
@transactional
def test_an_unusable_as_of_is_a_400_that_says_why(alice, effects, as_of, message):
    response = post_json(alice, "/shop/v1/session", {"message": "hi", "asOf": as_of})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and message in error["message"]
    assert [d["field"] for d in error["details"]] == ["asOf"]
    assert not Session.objects.exists()
