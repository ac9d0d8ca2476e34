"""The difference between two releases, section by section."""
from __future__ import annotations

import pytest

from agents.releasediff import diff_releases
from tests.agents.release_support import three_releases, write_release

SHOUT = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    text: str


@tool(description="Shout.", effect="read")
def shout(input: Input, ctx) -> str:
    return input.text.upper()
'''


@pytest.mark.django_db
def test_a_changed_instruction_line_is_the_only_change_between_two_releases(tmp_path):
    v1, v2, _ = three_releases(tmp_path)

    changed = {s.name: s for s in diff_releases(v2, v1) if s.changed}

    assert set(changed) == {"instructions", "schedules", "files"}
    assert "-Be thorough." in changed["instructions"].unified("v2", "v1")
    assert "+Be brief." in changed["instructions"].unified("v2", "v1")
    assert "Be&nbsp;brief." in changed["instructions"].table("v2", "v1")  # escaped: a release may hold HTML


@pytest.mark.django_db
def test_a_new_tool_shows_with_its_input_schema(tmp_path):
    from agents.discovery import deploy_agent_folder

    v1, *_ = three_releases(tmp_path)
    v4 = deploy_agent_folder(write_release(tmp_path / "helper", "You help.\nBe brief.", schedule=True, tools=SHOUT))

    changed = {s.name: s for s in diff_releases(v1, v4) if s.changed}

    assert set(changed) == {"tools", "files"}
    added = "\n".join(changed["tools"].unified("v1", "v4"))
    assert '"shout"' in added and '"text"' in added and '"inputSchema"' in added
    assert "+=== agent/tools/shout.py" in changed["files"].unified("v1", "v4")
