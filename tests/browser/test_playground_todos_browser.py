"""The model's plan (the `todos` built-in) in the playground, in real headless Chromium against a real
`manage.py serve`: it shows beside the conversation as the turn updates it, and again on a reload."""
from __future__ import annotations

import json
from typing import Iterator

import pytest

from tests.browser.test_playground_browser import expect, page, start_conversation  # noqa: F401
from tests.support import Server, run_server

PLANNER = "from agents.sdk import Agent\nagent = Agent(model='scripted:echo', tools=[], builtins=['todos'])\n"
FIRST = [{"content": "Find the order", "status": "in_progress"}, {"content": "Check the carrier", "status": "pending"}]
THEN = [{"content": "Find the order", "status": "done"}, {"content": "Check the carrier", "status": "done"}]

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("planner-agents")
    (agents / "planner" / "agent").mkdir(parents=True)
    (agents / "planner" / "agent" / "agent.py").write_text(PLANNER)
    (agents / "planner" / "agent" / "instructions.md").write_text("Plan, then act.\n")
    with run_server(tmp_path_factory.mktemp("planner-state"), "--no-examples", "--agents", str(agents)) as server:
        yield server


def test_the_plan_shows_live_beside_the_conversation_and_after_a_reload(page):
    start_conversation(page, "planner", "\n".join([
        "/call update_todos " + json.dumps({"items": FIRST}), "/next", "/sleep 1500",
        "/call update_todos " + json.dumps({"items": THEN})]))

    todos = page.locator("#todos")
    expect(todos).to_be_visible()
    expect(todos.locator("li")).to_have_text(["doing Find the order", "to do Check the carrier"])
    expect(page.locator("#todo-counts")).to_have_text("0 of 2 done")
    expect(page.locator("#status")).to_have_text("running")  # shown while the turn still runs

    expect(page.locator("#todo-counts")).to_have_text("2 of 2 done")
    expect(todos.locator("li.todo-done")).to_have_count(2)
    expect(page.locator("#status")).to_have_text("waiting")

    page.reload()
    expect(page.locator("#todo-counts")).to_have_text("2 of 2 done")
