"""A session's model and its handoff in the playground, in real headless Chromium against a real
`manage.py serve`: a person starts a conversation on one of the agent's models, sees it, opens
"Switch model…", reads the review of a switch to another model, hands off, and sees the session's
new model, the `session.handoff` event in the log and the next reply come from the new model.
A review that went stale is offered again; a handoff the target fails (an OpenAI-compatible
loopback server answering 500) leaves the session on its model and says so; a model the server
has no credential for is refused with the alternatives, and nothing can be handed off to it.
"""
from __future__ import annotations

import json
import re
from typing import Iterator

import pytest

from tests.browser.test_playground_browser import ARTIFACTS, expect, page  # noqa: F401
from tests.providers.loopback import LoopbackModelServer, Reply
from tests.support import Server, run_server

# Two scripted models the server runs without a key, one on an OpenAI-compatible server here,
# and one whose provider has no key here.
OPENAI = "openai:gpt-test"
MODELS = ["scripted:echo", "scripted:other", OPENAI, "anthropic:claude-sonnet-4-5"]
SWITCHER = f"""\
from agents.sdk import Agent

agent = Agent(models={MODELS!r}, params={{"max_retries": 0}}, description="Runs on any of four models.")
"""

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def openai_server() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer("openai") as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory, openai_server) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("handoff-agents")
    (agents / "switcher" / "agent").mkdir(parents=True)
    (agents / "switcher" / "agent" / "agent.py").write_text(SWITCHER)
    (agents / "switcher" / "agent" / "instructions.md").write_text("Echo the user.\n")
    env = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": "", "OPENAI_BASE_URL": f"{openai_server.url}/v1"}
    with run_server(tmp_path_factory.mktemp("handoff-state"), "--no-examples", "--agents", str(agents),
                    env=env) as server:
        yield server


def start_on(page, model: str, message: str) -> str:
    """From the agent page: pick a model, type a first message, start, land on the session page."""
    page.goto("/playground/switcher")
    page.select_option("#new-model", model)
    page.fill("#new-message", message)
    page.click("#new-session button[type=submit]")
    page.wait_for_url(re.compile(r"/playground/switcher/session/ses_\w+$"))
    expect(page.locator("#status")).to_have_text("waiting")
    return page.url.rsplit("/", 1)[1]


def send(page, message: str, replies: int) -> None:
    page.fill("#message", message)
    page.click("#follow-up button[type=submit]")
    expect(page.locator(".msg.assistant")).to_have_count(replies)
    expect(page.locator("#status")).to_have_text("waiting")


def review(page, model: str):
    page.select_option("#handoff-to", model)
    page.click("#handoff-review")
    box = page.locator("#handoff-body .review")
    # The review reads the session, its release and the credentials of every model on a loaded
    # machine; in two full runs it took longer than the default 5 s to appear.
    expect(box).to_have_attribute("data-to", model, timeout=30_000)
    return box


def session_log(page, session_id: str) -> list[dict]:
    response = page.request.get(f"/switcher/v1/session/{session_id}/events")
    assert response.ok, response.text()
    return [json.loads(line) for line in response.text().splitlines() if line]


def test_a_person_reviews_a_switch_hands_off_and_the_next_reply_comes_from_the_new_model(page):
    session_id = start_on(page, "scripted:other", "Hello before the switch")
    expect(page.locator("#model")).to_have_text("scripted:other")
    expect(page.locator(".turn-meta")).to_contain_text("on scripted:other ·")
    expect(page.locator("#handoff")).to_be_hidden()

    page.click("#switch-open")
    expect(page.locator("#handoff")).to_be_visible()
    targets = page.locator("#handoff-to option").evaluate_all("options => options.map(o => o.value)")
    assert targets == ["scripted:echo", OPENAI, "anthropic:claude-sonnet-4-5"], "the agent's other models"
    box = review(page, "scripted:echo")
    expect(box.locator("h3")).to_have_text("From scripted:other to scripted:echo")
    expect(box.locator(".carries-over .messages")).to_have_text("2 messages (1 from the user, 1 from the assistant)")
    expect(box.locator(".carries-over .tools")).to_have_text("0 tool calls and 0 tool results")
    expect(box.locator(".refusal")).to_have_count(0)
    go = box.get_by_role("button", name="Hand off")
    expect(go).to_be_enabled()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-handoff-review.png"), full_page=True)

    go.click()

    expect(page.locator("#handoff-result")).to_have_text(
        "Handed off from scripted:other to scripted:echo: the next turn runs on scripted:echo.")
    expect(page.locator("#model")).to_have_text("scripted:echo")
    event = page.locator('.handoff-event[data-status="completed"]')
    expect(event).to_have_text("handed off from scripted:other to scripted:echo")
    targets = page.locator("#handoff-to option").evaluate_all("options => options.map(o => o.value)")
    assert targets == ["scripted:other", OPENAI, "anthropic:claude-sonnet-4-5"], "now the way back is a switch"

    send(page, "Hello after the switch", replies=2)
    expect(page.locator(".msg.assistant").last).to_have_text("You said: Hello after the switch")
    expect(page.locator(".turn-meta").last).to_contain_text("on scripted:echo ·")

    events = session_log(page, session_id)
    [handoff] = [e for e in events if e["type"] == "session.handoff"]
    assert (handoff["data"]["from"], handoff["data"]["to"], handoff["data"]["status"]) == (
        "scripted:other", "scripted:echo", "completed")
    last_turn = [e for e in events if e["type"] == "turn.completed"][-1]
    assert [s["name"] for s in last_turn["data"]["timings"]["steps"] if s["kind"] == "model"] == ["scripted:echo"]

    page.screenshot(path=str(ARTIFACTS / "playground-handoff-done.png"), full_page=True)

    page.reload()  # the server renders the model the session is bound to now
    expect(page.locator("#model")).to_have_text("scripted:echo")
    expect(page.locator(".handoff-event")).to_have_count(1)


def test_a_review_the_session_moved_past_is_offered_again(page):
    start_on(page, "scripted:echo", "First")
    page.click("#switch-open")
    stale = review(page, "scripted:other")
    expect(stale.locator(".carries-over .messages")).to_contain_text("2 messages")

    send(page, "Second, after the review", replies=2)  # the conversation moves on
    stale.get_by_role("button", name="Hand off").click()

    result = page.locator("#handoff-result")
    expect(result.locator(".error")).to_have_attribute("data-code", "review_stale")
    expect(result.locator(".stayed")).to_have_text("The session stayed on scripted:echo.")
    expect(page.locator("#model")).to_have_text("scripted:echo")

    result.get_by_role("button", name="Review again").click()
    fresh = page.locator("#handoff-body .review")
    expect(fresh.locator(".carries-over .messages")).to_contain_text("4 messages")
    fresh.get_by_role("button", name="Hand off").click()
    expect(page.locator("#model")).to_have_text("scripted:other")


def test_a_handoff_the_target_fails_leaves_the_session_on_its_model(page, openai_server):
    session_id = start_on(page, "scripted:echo", "Hello")
    page.click("#switch-open")
    box = review(page, OPENAI)
    expect(box.locator(".refusal")).to_have_count(0)  # configured: its server's URL is set
    openai_server.replies.append(Reply(500, body={"error": {"message": "the target is down", "type": "server_error"}}))
    calls = len(openai_server.requests)

    box.get_by_role("button", name="Hand off").click()

    result = page.locator("#handoff-result")
    expect(result.locator(".error")).to_have_attribute("data-code", "handoff_failed")
    expect(result.locator(".error")).to_contain_text("Handoff failed (handoff_failed):")
    expect(result.locator(".stayed")).to_have_text("The session stayed on scripted:echo.")
    expect(page.locator("#model")).to_have_text("scripted:echo")
    event = page.locator('.handoff-event[data-status="failed"]')
    expect(event).to_contain_text(f"handoff to {OPENAI} failed")
    expect(event).to_contain_text("stayed on scripted:echo")
    assert len(openai_server.requests) == calls + 1, "the target was asked once"

    send(page, "Still here?", replies=2)  # the next turn runs where the session stayed
    expect(page.locator(".msg.assistant").last).to_have_text("You said: Still here?")
    expect(page.locator(".turn-meta").last).to_contain_text("on scripted:echo ·")
    [failed] = [e for e in session_log(page, session_id) if e["type"] == "session.handoff"]
    assert (failed["data"]["to"], failed["data"]["status"]) == (OPENAI, "failed")


def test_a_model_without_its_credential_is_refused_with_the_alternatives(page):
    session_id = start_on(page, "scripted:echo", "Hello")
    page.click("#switch-open")
    box = review(page, "anthropic:claude-sonnet-4-5")

    refusal = box.locator(".refusal")
    expect(refusal).to_be_visible()
    expect(refusal).to_contain_text("Refused:")
    expect(box.get_by_role("button", name="Hand off")).to_be_disabled()
    alternative = refusal.locator('button.alternative[data-model="scripted:other"]')
    expect(alternative).to_have_text("Review scripted:other")

    alternative.click()  # the refusal's alternative, reviewed in one click
    expect(box.locator(".refusal")).to_have_count(0)
    expect(page.locator("#handoff-body .review")).to_have_attribute("data-to", "scripted:other")
    expect(page.locator("#handoff-to")).to_have_value("scripted:other")
    expect(page.locator("#model")).to_have_text("scripted:echo")
    assert not [e for e in session_log(page, session_id) if e["type"] == "session.handoff"], "nothing moved"
