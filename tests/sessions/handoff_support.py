"""An agent that may run on several models, and loopback servers for both official clients at once."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from agents.discovery import deploy_agent_folder
from agents.models import Agent
from tests.conftest import EXAMPLE
from tests.providers.conftest import loopback_provider
from sessions.models import Session
from tests.providers.loopback import LoopbackModelServer, Reply, an_text, an_tool_uses

ANTHROPIC = "anthropic:claude-test"
OPENAI = "openai:gpt-test"


def deploy_on_models(root: Path, models: list[str], params: dict | None = None, slug: str = "duo") -> Agent:
    """A copy of the example agent (its order tools, no A/B experiments) that may run on `models`."""
    folder = root / slug
    shutil.copytree(EXAMPLE / "agent", folder / "agent", ignore=shutil.ignore_patterns("__pycache__", "ab.py"))
    (folder / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\n"
        f"agent = Agent(models={models!r}, params={params or {}!r}, description='two models', tools=[])\n")
    return deploy_agent_folder(folder).agent


@pytest.fixture
def both_servers(monkeypatch) -> Iterator[tuple[LoopbackModelServer, LoopbackModelServer]]:
    """(anthropic, openai) loopback servers, each provider's client pointed at its own."""
    anthropic = loopback_provider(monkeypatch, "anthropic")
    openai = loopback_provider(monkeypatch, "openai")
    first, second = next(anthropic), next(openai)
    try:
        yield first, second
    finally:
        for generator in (openai, anthropic):
            next(generator, None)


def open_session(client, slug: str, message: str) -> tuple[Session, str]:
    """A session whose first turn ran (turns run inline), and its continuation token."""
    created = client.post(f"/{slug}/v1/session", {"message": message}, content_type="application/json")
    assert created.status_code == 201, created.content
    body = created.json()
    return Session.objects.select_related("agent", "deployment").get(pk=body["sessionId"]), body["continuationToken"]


LOOKUP = [("toolu_a", "lookup_order", {"order_id": "A100"})]


def thinking_session_on(client, tmp_path: Path, anthropic: LoopbackModelServer, models: list[str]):
    """A session of `duo` (on `models`, the first Anthropic's) whose first turn left signed thinking and a
    call of the agent's tool in its conversation: (session, continuation token)."""
    deploy_on_models(tmp_path, models, {"thinking_budget": 1024})
    anthropic.replies.extend([
        Reply(events=an_text("", thinking="Let me look it up.")[:-3] + an_tool_uses(LOOKUP)[1:]),
        Reply(events=an_text("A100 is on its way.")),
    ])
    return open_session(client, "duo", "where is A100?")
