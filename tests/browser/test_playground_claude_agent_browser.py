"""A session on the Claude Agent SDK's runtime in the playground, in real headless Chromium against a
real `manage.py serve`: the page names the runtime, streams the runtime's reply, shows its gated call
for a person to approve, runs the call once approved, and draws each turn's waterfall with how the
turn had its runtime child (started, then kept for the follow-up)."""
from __future__ import annotations

import re
import shutil
from typing import Iterator

import pytest

from tests.browser.test_playground_browser import ARTIFACTS, expect, page  # noqa: F401
from tests.conftest import EXAMPLE
from tests.providers.loopback import LoopbackModelServer, Reply, an_text, an_tool_uses
from tests.support import Server, run_server

pytest.importorskip("claude_agent_sdk", reason="the optional runtime: pip install -r requirements-claude-agent.txt")

MODEL = "claude-agent:claude-sonnet-4-5"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def model_server() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer("anthropic") as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_server) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("runtime-agents")
    # The example agent (its gated cancel_order tool among its typed tools), on the runtime.
    shutil.copytree(EXAMPLE / "agent", agents / "official" / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (agents / "official" / "agent" / "agent.py").write_text(
        f"from agents.sdk import Agent\nagent = Agent(model={MODEL!r}, description='on the runtime', tools=[])\n")
    env = {"ANTHROPIC_BASE_URL": model_server.url, "ANTHROPIC_API_KEY": "sk-ant-browser"}
    with run_server(tmp_path_factory.mktemp("runtime-state"), "--no-examples", "--no-schedules",
                    "--agents", str(agents), env=env) as server:
        yield server


def test_a_runtime_sessions_gated_call_is_approved_in_the_page_and_its_follow_up_keeps_the_child(
        page, model_server):
    model_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_cancel", "mcp__agent__cancel_order", {"order_id": "A102"})])),
        Reply(events=an_text("Order A102 is cancelled.")),
        Reply(events=an_text("You asked me to cancel A102.")),
    ])
    page.goto("/playground/official")
    page.fill("#new-message", "cancel A102 please")
    page.click("#new-session button[type=submit]")
    page.wait_for_url(re.compile(r"/playground/official/session/ses_\w+$"))
    expect(page.locator("#runtime")).to_contain_text("Claude Agent SDK")
    expect(page.locator("#model")).to_have_text(MODEL)

    approval = page.locator(".approval")
    expect(approval).to_contain_text("Approval needed: cancel_order")
    expect(approval).to_contain_text('"order_id": "A102"')
    expect(page.locator("#status")).to_have_text("awaiting_approval")

    approval.get_by_role("button", name="Approve").click()

    expect(approval).to_have_count(0)
    card = page.locator(".tool-call")
    expect(card).to_have_class(re.compile(r"\bdone\b"))
    expect(card.locator(".result")).to_contain_text('"cancelled": true')
    expect(card.locator(".badge").last).to_have_text("approved by local")
    expect(page.locator(".msg.assistant").last).to_have_text("Order A102 is cancelled.")
    expect(page.locator("#status")).to_have_text("waiting")

    page.fill("#message", "what did I ask?")
    page.locator("#follow-up button[type=submit]").click()
    expect(page.locator(".msg.assistant").last).to_have_text("You asked me to cancel A102.")
    expect(page.locator("#status")).to_have_text("waiting")

    waterfalls = page.locator("details.waterfall")
    expect(waterfalls).to_have_count(2)
    expect(waterfalls.nth(0).locator(".totals")).to_contain_text("runtime")
    # The first turn started a child, and another for its part after the approval (parked, no child waits).
    expect(waterfalls.nth(0).locator(".lane.wf-runtime .label")).to_have_text(["runtime new", "runtime new"])
    expect(waterfalls.nth(1).locator(".lane.wf-runtime .label")).to_have_text(["runtime kept"])

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-claude-agent-session.png"), full_page=True)
