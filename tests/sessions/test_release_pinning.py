"""A session stays on the release it started on: after another release is activated, its
follow-ups, its reminders' wakes and its approvals resumed run the old release's code;
new sessions take the active one. Each release's tools say which release they are."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from agents.discovery.activation import activate_release, find_agent, find_release
from sessions.eventlog.events import read_events
from sessions.models import Session
from sessions.timers.schedules import create_reminder, fire_due

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
transactional = pytest.mark.django_db(transaction=True)

WHICH = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    pass


@tool(description="Say which release this is.", effect="read")
def which(input: Input, ctx) -> str:
    return "release {label}"
'''

PAY = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    amount: int


@tool(description="Send a payment.", effect="write", needs_approval=True)
def pay(input: Input, ctx) -> str:
    return f"paid {{input.amount}} by release {label}"
'''


def write_release(root: Path, label: str) -> Path:
    tools = root / "agent" / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (root / "agent" / "instructions.md").write_text(f"You are release {label}.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (tools / "which.py").write_text(WHICH.format(label=label))
    (tools / "pay.py").write_text(PAY.format(label=label))
    return root


@pytest.fixture
def pinned(db, tmp_path):
    """v1 and v2 of `pinned`, then v1 active again (so v2 comes back by activation, not by a deploy)."""
    root = tmp_path / "pinned"
    deploy_agent_folder(write_release(root, "v1"))
    deploy_agent_folder(write_release(root, "v2"))
    agent = find_agent("pinned")
    activate_release(find_release(agent, 1))
    return agent


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str) -> tuple[str, str]:
    response = post_json(client, "/pinned/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"], response.json()["continuationToken"]


def results(session_id: str) -> list:
    return [e["data"]["output"] for e in read_events(session_id) if e["type"] == "action.result"]


def bound_version(session_id: str) -> int:
    [bound] = [e["data"] for e in read_events(session_id) if e["type"] == "agent.bound"]
    return bound["deployment"]["version"]


def activate_v2() -> None:
    activate_release(find_release(find_agent("pinned"), 2))


@transactional
def test_follow_ups_reminders_and_approvals_after_an_activation_run_the_old_release(alice, pinned, sync_turns):
    chat, token = start(alice, "/call which {}")
    parked, _ = start(alice, '/call pay {"amount": 5}')
    [approval] = alice.get(f"/pinned/v1/session/{parked}/approvals").json()["approvals"]
    reminder = create_reminder(Session.objects.get(pk=chat), delay="1h", prompt="/call which {}", now=T0)
    assert results(chat) == ["release v1"]

    activate_v2()

    follow_up = post_json(alice, f"/pinned/v1/session/{chat}/message",
                          {"message": "/call which {}", "continuationToken": token})
    assert follow_up.status_code == 202, follow_up.content
    assert fire_due(now=T0 + timedelta(hours=1)) == 1
    reminder.refresh_from_db()
    assert reminder.fire_count == 1
    assert results(chat) == ["release v1"] * 3  # the first turn, the follow-up, the reminder's wake

    decided = post_json(alice, f"/pinned/v1/session/{parked}/approvals/{approval['callId']}", {"decision": "approve"})
    assert decided.status_code == 200, decided.content
    assert results(parked) == ["paid 5 by release v1"]

    for session_id in (chat, parked):
        assert bound_version(session_id) == 1
        assert Session.objects.get(pk=session_id).deployment.version == 1


@transactional
def test_new_sessions_take_the_release_activated_last(alice, pinned, sync_turns):
    before, _ = start(alice, "/call which {}")
    activate_v2()
    after, _ = start(alice, "/call which {}")

    assert (results(before), bound_version(before)) == (["release v1"], 1)
    assert (results(after), bound_version(after)) == (["release v2"], 2)
    detail = alice.get(f"/pinned/v1/session/{after}").json()
    assert detail["deployment"]["version"] == 2
