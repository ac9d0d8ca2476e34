from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import EXAMPLE
from tests.providers.loopback import LoopbackModelServer

# Per protocol: the base-URL variable, the API's path under the server, the key variable and a key.
CLIENT_ENV = {
    "anthropic": ("ANTHROPIC_BASE_URL", "", "ANTHROPIC_API_KEY", "sk-ant-test"),
    "openai": ("OPENAI_BASE_URL", "/v1", "OPENAI_API_KEY", "sk-test"),
}


def loopback_provider(monkeypatch, protocol: str) -> Iterator[LoopbackModelServer]:
    """A loopback server speaking `protocol`, with the provider's client pointed at it by the environment."""
    base_url_env, path, key_env, key = CLIENT_ENV[protocol]
    with LoopbackModelServer(protocol) as server:
        monkeypatch.setenv(base_url_env, server.url + path)
        monkeypatch.setenv(key_env, key)
        yield server


@pytest.fixture
def anthropic_server(monkeypatch) -> Iterator[LoopbackModelServer]:
    yield from loopback_provider(monkeypatch, "anthropic")


@pytest.fixture
def openai_server(monkeypatch) -> Iterator[LoopbackModelServer]:
    yield from loopback_provider(monkeypatch, "openai")


def start(client, slug: str, message: str) -> str:
    """Open a session on agent `slug` over HTTP; its id."""
    response = client.post(f"/{slug}/v1/session", {"message": message}, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


@pytest.fixture
def agent_on_model(db, tmp_path):
    """Deploy a copy of the example agent that uses `model` (and `params`)."""
    from agents.discovery import deploy_agent_folder

    def make(model: str, params: dict | None = None, slug: str = "remote", tools: list[str] | None = [],
             fallback: list[str] | None = None, budget: dict | None = None):
        root = tmp_path / slug
        shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
        declared = (f", fallback={fallback!r}" if fallback else "") + (f", budget={budget!r}" if budget else "")
        (root / "agent" / "agent.py").write_text(  # tools=[] as the example declares; None: the workspace's
            "from agents.sdk import Agent\n"
            f"agent = Agent(model={model!r}, params={params or {}!r}, description='remote model', tools={tools!r}"
            f"{declared})\n"
        )
        return deploy_agent_folder(Path(root)).agent

    return make


def event_types(session_id: str) -> list[str]:
    """Event types in order, runs of deltas collapsed (their coalescing depends on timing)."""
    from sessions.models import Event

    types: list[str] = []
    for t in Event.objects.filter(session_id=session_id).order_by("index").values_list("type", flat=True):
        if t.endswith(".appended") and types and types[-1] == t:
            continue
        types.append(t)
    return types


@pytest.fixture
def no_runtime_child_kept():
    """Claude Agent SDK children a test's turns kept for a next turn (sessions.claude_agent.pool) close with it."""
    yield
    from sessions.claude_agent import pool  # read once Django is set up: it loads the models

    pool.close_all()
