"""The `todos` built-in (`Agent(builtins=["todos"])`): the model's plan, kept in the session's log as
`todos.updated`, read back in a later turn, after a handoff to another model, and refused when it
is not a plan."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.handoff import perform, review
from sessions.models import Session

transactional = pytest.mark.django_db(transaction=True)

PLAN = [{"content": "Find the order", "status": "done"}, {"content": "Check the carrier", "status": "in_progress"},
        {"content": "Tell the customer", "status": "pending"}]


def deploy_planner(root: Path) -> None:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("Plan, then act.\n")
    (root / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\n"
        "agent = Agent(models=['scripted:echo', 'scripted:other'], tools=[], builtins=['todos'])\n")
    deploy_agent_folder(root)


def call(client, session_id: str | None, tool: str, arguments: dict) -> dict:
    """One turn that calls `tool` (a new session when `session_id` is None); its action.result."""
    message = f"/call {tool} {json.dumps(arguments)}"
    if session_id is None:
        response = client.post("/planner/v1/session", {"message": message}, content_type="application/json")
        assert response.status_code == 201, response.content
        session_id = response.json()["sessionId"]
    else:
        response = client.post(f"/planner/v1/session/{session_id}/message", {"message": message},
                               content_type="application/json")
        assert response.status_code == 202, response.content
    return {"sessionId": session_id, **[e["data"] for e in read_events(session_id) if e["type"] == "action.result"][-1]}


@transactional
def test_the_plan_is_logged_read_back_in_the_next_turn_and_kept_across_a_handoff(local, sync_turns, tmp_path):
    deploy_planner(tmp_path / "planner")

    updated = call(local, None, "update_todos", {"items": PLAN})
    session_id = updated["sessionId"]
    assert updated["output"] == {"items": PLAN, "pending": 1, "inProgress": 1, "done": 1}
    [logged] = [e for e in read_events(session_id) if e["type"] == "todos.updated"]
    assert logged["data"]["items"] == PLAN and logged["data"]["callId"] and logged["turnId"]
    assert call(local, session_id, "read_todos", {})["output"]["items"] == PLAN

    session = Session.objects.get(pk=session_id)
    perform(session, "scripted:other", review(session, "scripted:other")["reviewId"])
    assert Session.objects.get(pk=session_id).model == "scripted:other"
    assert call(local, session_id, "read_todos", {})["output"]["items"] == PLAN

    done = [{**item, "status": "done"} for item in PLAN]
    assert call(local, session_id, "update_todos", {"items": done})["output"]["done"] == 3
    assert call(local, session_id, "read_todos", {})["output"] == {"items": done, "pending": 0, "inProgress": 0,
                                                                  "done": 3}


@transactional
def test_a_new_session_has_no_plan_and_a_bad_one_is_refused_leaving_the_last(local, sync_turns, tmp_path):
    deploy_planner(tmp_path / "planner")

    empty = call(local, None, "read_todos", {})
    assert empty["output"] == {"items": [], "pending": 0, "inProgress": 0, "done": 0}
    session_id = empty["sessionId"]
    call(local, session_id, "update_todos", {"items": PLAN})
    refused = call(local, session_id, "update_todos", {"items": [{"content": "x", "status": "maybe"}]})
    assert "output" not in refused and "status" in refused["error"]
    assert call(local, session_id, "read_todos", {})["output"]["items"] == PLAN
    assert [e["type"] for e in read_events(session_id)].count("todos.updated") == 1
