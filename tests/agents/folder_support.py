"""Agent folders written for discovery tests, and the problems loading one reports."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, Problem, load_agent_folder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support"

GOOD_TOOL = """
    from pydantic import BaseModel
    from agents.sdk import tool

    class Input(BaseModel):
        city: str

    @tool(description="Say the weather in a city.")
    def weather(input: Input, ctx) -> str:
        return f"sunny in {input.city}"
"""


def make_agent(parent: Path, files: dict[str, str], name: str = "my-agent") -> Path:
    """Write an agent folder under `parent`; paths are relative to the folder, contents dedented."""
    root = parent / name
    root.mkdir(parents=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content).lstrip())
    return root


def minimal(**extra: str) -> dict[str, str]:
    return {"agent/instructions.md": "You help with the weather.", **extra}


def problems_of(root: Path) -> list[Problem]:
    with pytest.raises(AgentFolderError) as raised:
        load_agent_folder(root)
    assert raised.value.root == root.resolve()
    return raised.value.problems


def only_problem(root: Path) -> Problem:
    problems = problems_of(root)
    assert len(problems) == 1, problems
    return problems[0]
