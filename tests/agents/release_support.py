"""An agent with releases to move between: v1 (with a daily schedule), v2 and v3 (without)."""
from __future__ import annotations

from pathlib import Path

from agents.discovery import deploy_agent_folder
from agents.models import Deployment

SCHEDULE = "---\ncron: \"0 9 * * *\"\ntitle: Daily\n---\nSay good morning.\n"


def write_release(root: Path, instructions: str, *, schedule: bool = False, tools: str | None = None) -> Path:
    agent = root / "agent"
    (agent / "schedules").mkdir(parents=True, exist_ok=True)
    (agent / "instructions.md").write_text(instructions)
    daily = agent / "schedules" / "daily.md"
    if schedule:
        daily.write_text(SCHEDULE)
    elif daily.exists():
        daily.unlink()
    if tools is not None:
        (agent / "tools").mkdir(exist_ok=True)
        (agent / "tools" / "shout.py").write_text(tools)
    return root


def three_releases(tmp_path: Path, slug: str = "helper") -> list[Deployment]:
    """v1, v2 and v3 of `slug`, each deployed in turn (v3 active)."""
    root = tmp_path / slug
    made = []
    for n, instructions in enumerate(["You help.\nBe brief.", "You help.\nBe thorough.", "You help.\nBe funny."]):
        made.append(deploy_agent_folder(write_release(root, instructions, schedule=n == 0)))
    return made
