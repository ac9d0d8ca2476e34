"""Workspace tools in turns over HTTP, with the scripted model: write, list, read back,
files sent with messages, the runtime overlay, and deleting a session's workspace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings

from agents.discovery import deploy_agent_folder
from sessions.models import Session, ToolCall
from tests.channels_app.views.http import event_types, events_of, post_json, transactional


def call(tool: str, **arguments) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def make_agent(root: Path, agent_py: str = "", files: dict[str, str] | None = None) -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You keep notes in your workspace.\n")
    if agent_py:
        (root / "agent" / "agent.py").write_text(agent_py)
    for rel, content in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


@pytest.fixture
def notes(db, tmp_path):
    return deploy_agent_folder(make_agent(tmp_path / "notes")).agent


def start(client, slug: str, message: str, **fields) -> dict:
    response = post_json(client, f"/{slug}/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def results(session_id: str) -> list[dict]:
    return events_of(session_id, "action.result")


@transactional
def test_a_turn_writes_a_file_lists_it_and_reads_it_back(alice, notes, sync_turns):
    script = "\n".join([call("write", path="notes/todo.md", content="- buy milk\n"), "/next",
                        call("ls", path="notes"), "/next", call("read", path="notes/todo.md")])
    session_id = start(alice, "notes", script)["sessionId"]

    write, ls, read = results(session_id)
    assert write["output"] == {"path": "notes/todo.md", "bytes": 11}
    assert ls["output"] == {"path": "notes", "entries": [{"name": "todo.md", "type": "file", "size": 11}]}
    assert read["output"] == "- buy milk\n"
    requested = [c for e in events_of(session_id, "actions.requested") for c in e["calls"]]
    assert [(c["toolName"], c["family"]) for c in requested] == [("write", "workspace"), ("ls", "workspace"),
                                                                 ("read", "workspace")]
    assert events_of(session_id, "message.completed")[-1]["text"] == "Tool results:\nread (ok): - buy milk\n"
    assert (Path(settings.AGENTSITE_WORKSPACES_ROOT) / session_id / "notes" / "todo.md").read_text() == "- buy milk\n"
    assert Session.objects.get(pk=session_id).status == "waiting"
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]
