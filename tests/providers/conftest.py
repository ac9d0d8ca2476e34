from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE


@pytest.fixture
def agent_on_model(db, tmp_path):
    """Deploy a copy of the example agent that uses `model` (and `params`)."""
    from agents.discovery import deploy_agent_folder

    def make(model: str, params: dict | None = None, slug: str = "remote", tools: list[str] | None = []):
        root = tmp_path / slug
        shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
        (root / "agent" / "agent.py").write_text(  # tools=[] as the example declares; None: the workspace's
            "from agents.sdk import Agent\n"
            f"agent = Agent(model={model!r}, params={params or {}!r}, description='remote model', tools={tools!r})\n"
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
