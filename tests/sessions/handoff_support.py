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
from tests.providers.loopback import LoopbackModelServer

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
