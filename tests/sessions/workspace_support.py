"""Agent folders and sessions for the workspace tests, and what a turn's tools returned."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.principal import Principal
from tests.sessions.test_lifecycle import post_json

transactional = pytest.mark.django_db(transaction=True)
ME = Principal(authenticator="bearer", principal_id="alice")

WEATHER = '''
from pydantic import BaseModel
from agents.sdk import tool

class Input(BaseModel):
    city: str

@tool(description="Say the weather in a city.", execution="agent")
def weather(input: Input, ctx) -> dict:
    return {"city": input.city, "sky": "clear"}
'''


def call(tool: str, **arguments) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def deploy(tmp_path: Path, name: str, agent_py: str = "", files: dict[str, str] | None = None):
    root = tmp_path / name
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You work in your workspace.\n")
    if agent_py:
        (root / "agent" / "agent.py").write_text(textwrap.dedent(agent_py))
    for rel, content in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return deploy_agent_folder(root).agent


def start(client, slug: str, message: str, **fields) -> str:
    response = post_json(client, f"/{slug}/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def results(session_id: str) -> list[dict]:
    return [e["data"] for e in read_events(session_id) if e["type"] == "action.result"]


def workspace_of(session_id: str) -> Path:
    return Path(settings.AGENTSITE_WORKSPACES_ROOT) / session_id


def leftovers(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found
