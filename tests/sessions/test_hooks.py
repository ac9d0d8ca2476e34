"""Hooks: observe-only handlers in agent/hooks/<name>.py, called with each
event envelope after the event is stored. A hook that raises is logged and
never breaks the turn, nor the hooks after it."""
from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents.discovery import AgentFolderError, deploy_agent_folder, load_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Session, Turn
from sessions.turn.recovery import sweep

transactional = pytest.mark.django_db(transaction=True)

RECORD_HOOK = '''\
import json
from agents.sdk import hook


@hook("*")
def record(event):
    # Hooks run after the event is stored: it must already be readable.
    from sessions.models import Event

    stored = Event.objects.filter(session_id=event["sessionId"], index=event["index"]).exists()
    with open({path!r}, "a") as f:
        f.write(json.dumps({{"stored": stored, "event": event}}) + "\\n")
'''

ENDINGS_HOOK = '''\
from agents.sdk import hook


@hook("turn.completed", "turn.failed")
def ending(event):
    with open({path!r}, "a") as f:
        f.write(event["type"] + " " + event["turnId"] + "\\n")
'''

# Sorts first, so it runs before the others on every event.
BROKEN_HOOK = '''\
from agents.sdk import hook


@hook("*")
def explode(event):
    raise RuntimeError("hook exploded on " + event["type"])
'''

GATED_TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    amount: int


@tool(description="Send a payment.", effect="write", needs_approval=True)
def send_payment(input: Input, ctx) -> dict:
    return {"sent": input.amount}
'''


def write_agent(root: Path, recorded: Path, endings: Path, *, broken: bool = True) -> Path:
    agent = root / "agent"
    (agent / "hooks").mkdir(parents=True)
    (agent / "tools").mkdir()
    (agent / "instructions.md").write_text("You watch.\n")
    (agent / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (agent / "tools" / "send_payment.py").write_text(GATED_TOOL)
    (agent / "hooks" / "record.py").write_text(RECORD_HOOK.format(path=str(recorded)))
    (agent / "hooks" / "endings.py").write_text(ENDINGS_HOOK.format(path=str(endings)))
    if broken:
        (agent / "hooks" / "a_broken.py").write_text(BROKEN_HOOK)
    return root


@pytest.fixture
def files(tmp_path) -> tuple[Path, Path]:
    return tmp_path / "recorded.jsonl", tmp_path / "endings.txt"


@pytest.fixture
def watched(db, tmp_path, files):
    deploy_agent_folder(write_agent(tmp_path / "watched", *files))
    return files


def recorded(path: Path) -> list[dict]:
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    assert all(entry["stored"] for entry in entries), "a hook ran before its event was stored"
    return [entry["event"] for entry in entries]


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str) -> str:
    response = post_json(client, "/watched/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def stored(session_id: str) -> list[dict]:
    """The session's events, in order."""
    found = read_events(session_id)
    assert [e["index"] for e in found] == list(range(len(found)))
    return found


@transactional
def test_a_star_hook_sees_every_event_of_the_session_in_order(alice, watched, sync_turns):
    recorded_file, endings_file = watched
    session_id = start(alice, "/think first\nhello")

    seen = recorded(recorded_file)
    assert seen == stored(session_id), "the same envelopes, in index order, each once"
    assert [e["type"] for e in seen][:4] == ["session.started", "agent.bound", "message.received", "turn.started"]
    assert [e["type"] for e in seen][-2:] == ["turn.completed", "session.waiting"]
    assert {"reasoning.completed", "message.completed"} <= {e["type"] for e in seen}
    # A hook on named types sees only those.
    assert endings_file.read_text().splitlines() == [f"turn.completed {seen[-1]['turnId']}"]

    follow = post_json(alice, f"/watched/v1/session/{session_id}/message", {"message": "again"})
    assert follow.status_code == 202
    assert recorded(recorded_file) == stored(session_id)
    assert len(endings_file.read_text().splitlines()) == 2


@transactional
def test_a_hook_that_raises_is_logged_and_breaks_nothing(alice, watched, sync_turns, caplog):
    recorded_file, _ = watched
    with caplog.at_level(logging.ERROR, logger="sessions.eventlog.events"):
        session_id = start(alice, "hello")

    types = [e["type"] for e in read_events(session_id)]
    assert types[-2:] == ["turn.completed", "session.waiting"]
    assert Session.objects.get(pk=session_id).status == Session.Status.WAITING
    failures = [r for r in caplog.records if r.getMessage().startswith("hook explode failed on ")]
    assert len(failures) == len(stored(session_id)), "logged once per event it failed on"
    assert "hook exploded on session.started" in str(failures[0].exc_info[1])
    # The hooks after it still ran on every event.
    assert recorded(recorded_file) == stored(session_id)


@transactional
def test_hooks_see_the_approval_decision_and_the_resumed_run(alice, watched, sync_turns):
    recorded_file, endings_file = watched
    session_id = start(alice, '/call send_payment {"amount": 3}')
    assert [e["type"] for e in recorded(recorded_file)][-1] == "action.approval_requested"
    call_id = recorded(recorded_file)[-1]["data"]["callId"]

    decided = post_json(alice, f"/watched/v1/session/{session_id}/approvals/{call_id}", {"decision": "approve"})
    assert decided.status_code == 200, decided.content

    seen = recorded(recorded_file)
    assert seen == stored(session_id)
    types = [e["type"] for e in seen]
    assert types[types.index("action.approval_requested"):][:3] == [
        "action.approval_requested", "action.approval_resolved", "action.result",
    ]
    assert types[-2:] == ["turn.completed", "session.waiting"]
    assert len(endings_file.read_text().splitlines()) == 1


@transactional
def test_hooks_see_a_turn_failed_by_recovery(alice, watched, sync_turns):
    recorded_file, endings_file = watched
    session_id = start(alice, "hello")
    # A turn whose worker vanished: running, with a lease that lapsed.
    lost = Turn.objects.create(session_id=session_id, status=Turn.Status.RUNNING, message="lost",
                               claimed_by="elsewhere:1", lease_until=timezone.now() - timedelta(seconds=5))
    Session.objects.filter(pk=session_id).update(active_turn=lost, status=Session.Status.RUNNING)

    assert sweep() == 1

    seen = recorded(recorded_file)
    assert seen == stored(session_id)
    assert [e["type"] for e in seen][-2:] == ["turn.failed", "session.waiting"]
    assert seen[-2]["data"]["code"] == "worker_lost"
    assert endings_file.read_text().splitlines()[-1] == f"turn.failed {lost.id}"


@transactional
def test_hooks_see_the_events_of_a_deterministic_session_call(alice, watched, sync_turns, tmp_path):
    recorded_file, _ = watched
    session_id = start(alice, "hello")
    # send_payment is gated: the direct call parks until approved, then runs in a worker.
    called = post_json(alice, "/watched/v1/tools/send_payment/call", {"input": {"amount": 1}, "sessionId": session_id})
    assert called.status_code == 202, called.content
    decided = post_json(alice, f"/watched/v1/session/{session_id}/approvals/{called.json()['callId']}",
                        {"decision": "approve"})
    assert decided.status_code == 200, decided.content

    seen = recorded(recorded_file)
    assert seen == stored(session_id)
    assert [e["type"] for e in seen][-4:] == [
        "actions.requested", "action.approval_requested", "action.approval_resolved", "action.result"]


def test_a_hook_file_without_a_handler_is_an_error_naming_it(tmp_path, files):
    root = write_agent(tmp_path / "watched", *files, broken=False)
    (root / "agent" / "hooks" / "idle.py").write_text("def not_a_hook(event):\n    pass\n")
    (root / "agent" / "hooks" / "nameless.py").write_text("from agents.sdk import hook\n\n@hook()\ndef f(event):\n    pass\n")

    with pytest.raises(AgentFolderError) as raised:
        load_agent_folder(root)

    problems = [str(p) for p in raised.value.problems]
    assert problems[0].startswith("agent/hooks/idle.py: define at least one handler with @hook(")
    assert problems[1].startswith("agent/hooks/nameless.py: failed to import: TypeError: name the event types")
    assert len(problems) == 2


def test_the_manifest_lists_the_observed_event_types(tmp_path, files):
    loaded = load_agent_folder(write_agent(tmp_path / "watched", *files))

    assert len(loaded.hooks) == 3
    assert loaded.manifest()["hooks"] == ["*", "turn.completed", "turn.failed"]
