"""An author in real headless Chromium against `manage.py serve --dev`: saves the agent's folder
and sees, without reloading the page, "v2 deployed" with a link to a new session on it, an open
session's page saying it stays on its release, and a broken file named until it is fixed.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.browser.test_playground_browser import expect
from tests.support import Server, run_server

pytestmark = pytest.mark.timeout(180)

AGENT = 'from agents.sdk import Agent\n\nagent = Agent(model="scripted:echo", name="Hello", tools=[])\n'


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("reload-agents") / "hello"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "agent.py").write_text(AGENT)
    (folder / "agent" / "instructions.md").write_text("First draft.")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory, folder) -> Iterator[Server]:
    with run_server(tmp_path_factory.mktemp("reload-state"), "--dev", "--no-examples", "--workers", "1",
                    "--agents", str(folder)) as server:
        yield server


def test_a_save_shows_on_the_open_pages_and_a_click_starts_on_the_new_release(new_context, server, folder):
    created = httpx.post(f"{server.base_url}/hello/v1/session", json={"message": "hi"}, timeout=10)
    assert created.status_code == 201, created.text
    context = new_context(base_url=server.base_url, viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    agent_page, session_page = context.new_page(), context.new_page()
    for page in (agent_page, session_page):
        page.on("pageerror", lambda error: errors.append(str(error)))
    agent_page.goto("/playground/hello")
    session_page.goto(f"/playground/hello/session/{created.json()['sessionId']}")
    expect(agent_page.locator("#release-watch .watching")).to_be_visible()
    expect(agent_page.locator("#release-watch .release-new")).to_be_hidden()

    (folder / "agent" / "instructions.md").write_text("Second draft.")
    expect(agent_page.locator("#release-watch .release-new")).to_contain_text("v2 deployed")
    expect(session_page.locator("#release-watch .release-new")).to_contain_text("this session stays on v1")

    tool = folder / "agent" / "tools" / "broken.py"
    tool.parent.mkdir()
    tool.write_text("def broken(:\n")
    problems = agent_page.locator("#release-watch .folder-error")
    expect(problems).to_contain_text("agent/tools/broken.py")
    expect(problems).to_contain_text("SyntaxError")
    expect(problems).to_contain_text("v2 still serves")
    tool.unlink()
    expect(problems).to_be_hidden()

    agent_page.click("#release-watch .release-start")
    agent_page.wait_for_url(re.compile(r"/playground/hello#new-message$"))
    expect(agent_page.locator(".info-panel")).to_contain_text("v2")
    agent_page.fill("#new-message", "/system")
    agent_page.click("#new-session button[type=submit]")
    agent_page.wait_for_url(re.compile(r"/playground/hello/session/"))
    expect(agent_page.locator("#conversation")).to_contain_text("Second draft.")
    assert errors == []
