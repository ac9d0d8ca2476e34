"""The agent's question (the `ask_question` built-in) in the playground, in real headless Chromium
against a real `manage.py serve`: it shows as a card with its options, still there after a reload, and
one click (or the person's own words) answers it; the answer is the call's result and the turn goes on."""
from __future__ import annotations

import json
from typing import Iterator

import pytest

from tests.browser.test_playground_browser import (  # noqa: F401
    ARTIFACTS, expect, page, session_log, start_conversation,
)
from tests.sessions.test_builtin_ask_question import write_asker
from tests.support import Server, run_server

CHOICE = {"question": "Which carrier should I use?", "options": ["UPS", "DHL"]}
OPEN = {"question": "What is the order number?"}

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("asker-agents")
    write_asker(agents / "asker")
    with run_server(tmp_path_factory.mktemp("asker-state"), "--no-examples", "--agents", str(agents)) as server:
        yield server


def test_a_question_is_answered_with_a_click_or_in_the_persons_own_words(page):
    session_id = start_conversation(page, "asker", "/call ask_question " + json.dumps(CHOICE))

    question = page.locator(".question")
    expect(question.locator(".question-text")).to_have_text(CHOICE["question"])
    expect(question.locator("button.option")).to_have_text(["UPS", "DHL"])
    expect(page.locator("#status")).to_have_text("awaiting_approval")
    page.reload()  # a question still waiting is drawn again from the log
    expect(question.locator("button.option")).to_have_count(2)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-question.png"), full_page=True)
    question.get_by_role("button", name="DHL").click()
    expect(question).to_have_count(0)
    expect(page.locator(".msg.assistant").last).to_contain_text("ask_question (ok): DHL")
    expect(page.locator("#status")).to_have_text("waiting")
    expect(page.locator(".badge", has_text="answered by")).to_have_count(1)

    page.fill("#message", "/call ask_question " + json.dumps(OPEN))
    page.click("#follow-up button[type=submit]")
    expect(question.locator(".question-text")).to_have_text(OPEN["question"])
    expect(question.locator("button.option")).to_have_count(0)
    question.locator("input[name=answer]").fill("A102")
    question.get_by_role("button", name="Answer").click()
    expect(question).to_have_count(0)
    expect(page.locator(".msg.assistant").last).to_contain_text("ask_question (ok): A102")

    results = [e["data"]["output"] for e in session_log(page, "asker", session_id) if e["type"] == "action.result"]
    assert results == ["DHL", "A102"]
