"""The playground in real headless Chromium against a real `manage.py serve`.

A person's paths through the page: start a conversation and watch the reply
stream in, approve a parked tool call with the page's button, stop a slow
turn, reload mid-stream, and lose the socket mid-stream. After a reload or a
drop the page must have rendered every event exactly once: the indexes it
rendered are exactly 0..N-1 of the session's log.

Chromium is Debian's (`apt-get install chromium`), driven by the `playwright`
package; `playwright install` is never needed. Every wait is bounded.
"""
from __future__ import annotations

import contextlib
import json
import re
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from agents.evals.discovery import discover_cases
from tests.channels_app.views.test_session_artifacts import REPORT_TOOL
from tests.sessions.test_tracing_live import otlp_receiver
from tests.support import ROOT, Server, run_server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
MISSING = (
    f"Chromium is not installed at {CHROMIUM}: the playground's browser tests drive Debian's Chromium. "
    "Install it with `apt-get install chromium` (do not run `playwright install`)."
)
ARTIFACTS = ROOT / "test-artifacts"
WAIT_MS = 15_000  # the bound on every wait for the page
TRACE_URL = "http://traces.example/trace/{traceId}"

# Every streamed chunk of the reply waits, so a turn stays in flight long
# enough to reload the page or drop its socket in the middle of it.
SLOW_AGENT = """\
from agents.sdk import Agent

agent = Agent(model="scripted:echo", params={"chunk_delay_ms": 40}, description="Echoes slowly.")
"""
# ~50 chunks of ~5 words: a reply that streams for about two seconds.
LONG_MESSAGE = " ".join(f"w{i:03d}" for i in range(250))

pytestmark = pytest.mark.timeout(60)


def test_chromium_is_installed():
    if not CHROMIUM.exists():
        pytest.fail(MISSING)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("browser-agents")
    (agents / "slow" / "agent").mkdir(parents=True)
    (agents / "slow" / "agent" / "agent.py").write_text(SLOW_AGENT)
    (agents / "slow" / "agent" / "instructions.md").write_text("Echo the user, slowly.\n")
    (agents / "reporter" / "agent" / "tools").mkdir(parents=True)
    (agents / "reporter" / "agent" / "instructions.md").write_text("Write reports.\n")
    (agents / "reporter" / "agent" / "tools" / "make_report.py").write_text(textwrap.dedent(REPORT_TOOL))
    # --dev: provider webhook routes take unsigned deliveries from this machine (their Try forms).
    # Traced, into a receiver here: turns show their trace ids, linked to a trace viewer.
    with otlp_receiver() as (_, endpoint), run_server(
            tmp_path_factory.mktemp("browser-state"), "--agents", str(agents), "--dev",
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "AGENTSITE_TRACE_URL": TRACE_URL}) as server:
        yield server


@contextlib.contextmanager
def chromium():
    """Debian's Chromium, headless, for the browser fixture of tests/browser/conftest.py (a failure if it is missing)."""
    if not CHROMIUM.exists():
        pytest.fail(MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(base_url=server.base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the page raised: {errors}"


def expect(target):
    """Playwright's `expect` with the same bound as every other wait (its own default is 5 s, which the
    first turn of a server just started can outlast on a loaded machine: its workers are still starting)."""
    from playwright.sync_api import expect as playwright_expect

    playwright_expect.set_options(timeout=WAIT_MS)
    return playwright_expect(target)


def start_conversation(page, slug: str, message: str) -> str:
    """From the agent page: type a first message, start, land on the session page."""
    page.goto(f"/playground/{slug}")
    page.fill("#new-message", message)
    page.click("#new-session button[type=submit]")
    page.wait_for_url(re.compile(rf"/playground/{slug}/session/ses_\w+$"))
    return page.url.rsplit("/", 1)[1]


def wait_for_index(page, at_least: int) -> None:
    page.wait_for_function(f"+(document.getElementById('session').dataset.nextIndex || 0) >= {at_least}")


def session_log(page, slug: str, session_id: str) -> list[dict]:
    response = page.request.get(f"/{slug}/v1/session/{session_id}/events")
    assert response.ok, response.text()
    return [json.loads(line) for line in response.text().splitlines() if line]


def items_expected(events: list[dict]) -> list[int]:
    """The indexes that get an <li> of their own, for turns without tools: a user message,
    the first text of each step (later deltas append to its bubble), turn results."""
    items: list[int] = []
    has_bubble: set[str] = set()
    for event in events:
        kind, turn = event["type"], event["turnId"]
        if kind == "step.started":
            has_bubble.discard(turn)
        elif kind in ("message.appended", "message.completed"):
            if turn not in has_bubble:
                has_bubble.add(turn)
                items.append(event["index"])
        elif kind in ("message.received", "turn.completed", "turn.failed"):
            items.append(event["index"])
    return items


def assert_rendered_once(page, slug: str, session_id: str) -> list[dict]:
    """The page rendered every event of the log exactly once, in order."""
    events = session_log(page, slug, session_id)
    n = len(events)
    assert [e["index"] for e in events] == list(range(n))
    assert page.evaluate("window.sessionView.rendered") == list(range(n)), "every index once: no gap, no duplicate"
    assert page.get_attribute("#session", "data-next-index") == str(n)
    li_indexes = page.eval_on_selector_all("#conversation > li", "items => items.map(li => +li.dataset.index)")
    assert li_indexes == items_expected(events)
    completed = [e["data"]["text"] for e in events if e["type"] == "message.completed"]
    assert page.locator(".msg.assistant").all_inner_texts() == completed
    return events


def test_a_new_conversation_streams_its_reply(page):
    page.goto("/playground/")
    page.click('a[href="/playground/support"]')
    page.wait_for_url(re.compile(r"/playground/support$"))

    session_id = start_conversation(page, "support", "Hello from the browser")

    expect(page.locator(".msg.user")).to_have_text("Hello from the browser")
    expect(page.locator(".msg.assistant")).to_have_text("You said: Hello from the browser")
    expect(page.locator("#status")).to_have_text("waiting")
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator(".turn-meta")).to_contain_text("tokens")

    # A follow-up from the composer under the conversation.
    page.fill("#message", "And again")
    page.click("#follow-up button[type=submit]")
    expect(page.locator(".msg.assistant")).to_have_text(["You said: Hello from the browser", "You said: And again"])
    expect(page.locator("#status")).to_have_text("waiting")
    assert_rendered_once(page, "support", session_id)

    # The agent page now lists the session.
    page.goto("/playground/support")
    expect(page.locator(f'tr[data-session="{session_id}"]')).to_be_visible()


def test_a_finished_task_session_ends_its_stream_for_good(page):
    page.goto("/playground/support")
    page.fill("#new-message", "Do one thing")
    page.select_option("#new-session select[name=mode]", "task")
    page.click("#new-session button[type=submit]")
    page.wait_for_url(re.compile(r"/playground/support/session/ses_\w+$"))

    expect(page.locator(".msg.assistant")).to_have_text("You said: Do one thing")
    expect(page.locator("#status")).to_have_text("completed")
    expect(page.locator("#connection")).to_have_text("ended")
    expect(page.locator("#follow-up")).to_have_count(0)


def test_approving_a_parked_call_in_the_page_runs_it(page):
    page.goto("/playground/support")
    page.get_by_role("button", name="call cancel_order (approval)").first.click()
    assert page.input_value("#new-message") == '/call cancel_order {"order_id": "A102"}'
    page.click("#new-session button[type=submit]")
    page.wait_for_url(re.compile(r"/playground/support/session/ses_\w+$"))

    approval = page.locator(".approval")
    expect(approval).to_contain_text("Approval needed: cancel_order")
    expect(approval).to_contain_text('"order_id": "A102"')
    card = page.locator(".tool-call")
    expect(card.locator(".args")).to_contain_text('"order_id": "A102"')
    expect(card.locator(".result")).to_be_hidden()
    expect(page.locator("#status")).to_have_text("awaiting_approval")
    expect(page.locator("#stop")).to_be_enabled()

    approval.get_by_role("button", name="Approve").click()

    expect(approval).to_have_count(0)
    expect(card).to_have_class(re.compile(r"\bdone\b"))
    expect(card.locator(".result")).to_contain_text('"cancelled": true')
    expect(card.locator(".badge")).to_have_text("approved by local")
    expect(card.locator(".dur")).to_contain_text("ms")
    expect(page.locator(".msg.assistant").last).to_contain_text("cancel_order (ok)")
    expect(page.locator("#status")).to_have_text("waiting")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-session.png"), full_page=True)


def test_each_turn_shows_a_waterfall_of_where_its_time_went(page):
    session_id = start_conversation(page, "support", '/sleep 150\n/call cancel_order {"order_id": "A102"}')
    approval = page.locator(".approval")
    expect(approval).to_contain_text("Approval needed: cancel_order")
    page.wait_for_timeout(400)  # a measured wait for the decision
    approval.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("waiting")

    # Live, under the turn's result: its timings, folded.
    live = page.locator("details.waterfall")
    expect(live).to_have_count(1)
    live.locator("summary").click()
    kinds = ["queue", "load", "workspace", "model", "approval", "queue", "load", "workspace", "tool", "model", "settle"]
    assert live.locator(".lane").evaluate_all("lanes => lanes.map(l => l.dataset.kind)") == kinds
    expect(live.locator(".lane.wf-approval .label")).to_have_text("approval cancel_order")
    expect(live.locator(".totals")).to_contain_text("approval")
    trace_id = page.evaluate(f"fetch('/support/v1/session/{session_id}').then(r => r.json())")["lastTurn"]["traceId"]
    assert len(trace_id) == 32
    expect(live.locator(".trace-id")).to_have_text(trace_id)

    # The trace page draws the same waterfall from the stored events.
    page.click(f'a[href="/playground/support/session/{session_id}/trace"]')
    trace = page.locator(".trace-turn .waterfall")
    expect(trace.locator(".lane")).to_have_count(len(kinds))
    assert trace.locator(".lane").evaluate_all("lanes => lanes.map(l => l.dataset.kind)") == kinds
    expect(trace.locator(".lane.wf-tool .label")).to_have_text("tool cancel_order")
    expect(trace.locator(".totals")).to_contain_text("total")
    link = page.locator(".trace-turn a.trace-id")
    expect(link).to_have_text(trace_id)
    expect(link).to_have_attribute("href", TRACE_URL.replace("{traceId}", trace_id))
    # Bars in the order their stages started, each inside its lane, sized by their stage's share.
    boxes = [lane.locator(".bar").bounding_box() for lane in trace.locator(".lane").all()]
    wraps = [lane.locator(".bar-wrap").bounding_box() for lane in trace.locator(".lane").all()]
    lefts = [b["x"] for b in boxes]
    assert lefts == sorted(lefts), lefts
    for bar, wrap in zip(boxes, wraps):
        assert wrap["x"] - 0.5 <= bar["x"] and bar["x"] + bar["width"] <= wrap["x"] + wrap["width"] + 0.5
    assert all(b["width"] > 0 for b in boxes), "even a stage of a few ms shows"
    assert boxes[kinds.index("approval")]["width"] > boxes[kinds.index("model")]["width"], "waited 400 ms, slept 150"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-trace.png"), full_page=True)


def test_an_artifact_a_turn_saves_appears_as_a_download_link(page):
    start_conversation(page, "reporter", "hello")
    expect(page.locator("#status")).to_have_text("waiting")
    expect(page.locator("#artifacts")).to_be_hidden()

    # Saved by a turn that runs while the page is open: its event adds the link.
    page.fill("#message", '/call make_report {"name": "q3.md", "text": "# Q3 report"}')
    page.click("#follow-up button[type=submit]")
    link = page.locator("#artifacts a")
    expect(page.locator("#artifacts")).to_be_visible()
    expect(link).to_have_text("q3.md")
    expect(page.locator("#artifacts li")).to_contain_text("text/markdown")
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "q3.md"
    assert Path(download.value.path()).read_text() == "# Q3 report"

    page.reload()  # the server renders the same list
    expect(page.locator("#artifacts a")).to_have_text("q3.md")


def test_stop_interrupts_a_slow_turn(page):
    start_conversation(page, "support", "/sleep 4000\n/sleep 4000\n/sleep 4000\nToo late.")
    stop = page.locator("#stop")
    expect(page.locator("#status")).to_have_text("running")
    expect(stop).to_be_enabled()

    stop.click()

    expect(page.locator(".turn-meta.failed")).to_have_text("turn failed: turn interrupted")
    expect(page.locator("#status")).to_have_text("waiting")
    expect(stop).to_be_disabled()
    expect(page.locator(".msg.assistant")).to_have_count(0)


def test_reloading_mid_stream_renders_every_event_once(page):
    session_id = start_conversation(page, "slow", LONG_MESSAGE)
    wait_for_index(page, 12)  # a few chunks of the reply are on the page
    before = int(page.get_attribute("#session", "data-next-index"))

    page.reload()

    expect(page.locator("#status")).to_have_text("waiting")
    events = assert_rendered_once(page, "slow", session_id)
    ended = next(e["index"] for e in events if e["type"] == "turn.completed")
    assert before < ended, "the reload happened while the reply was streaming"
    assert page.locator(".msg.assistant").inner_text() == f"You said: {LONG_MESSAGE}"


def test_a_dropped_socket_reconnects_and_resumes_where_it_stopped(page):
    session_id = start_conversation(page, "slow", LONG_MESSAGE)
    wait_for_index(page, 12)

    # Drop the socket; the page reconnects by itself from the first index it has not rendered.
    with page.expect_websocket(timeout=WAIT_MS) as reconnect:
        resume_at = page.evaluate("() => { const v = window.sessionView; const n = v.nextIndex; v.socket.close(); return n; }")
    assert reconnect.value.url.endswith(f"/slow/v1/session/{session_id}/ws?startIndex={resume_at}")

    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator("#status")).to_have_text("waiting")
    events = assert_rendered_once(page, "slow", session_id)
    ended = next(e["index"] for e in events if e["type"] == "turn.completed")
    assert resume_at < ended, "the socket dropped while the reply was streaming"
    assert page.locator(".msg.assistant").inner_text() == f"You said: {LONG_MESSAGE}"


def test_a_custom_channel_route_can_be_tried_from_the_agent_page(page):
    page.goto("/playground/webhook")
    page.click('details[data-channel="inbox"] > summary')
    post_form = page.locator('form.channel-try[data-url="/webhook/v1/channels/inbox/messages"]')
    post_form.locator("textarea").fill('{"text": "tried in the page", "thread": "try-1"}')
    post_form.locator("button[type=submit]").click()

    expect(post_form.locator(".try-result")).to_contain_text("HTTP 200")
    expect(post_form.locator(".try-result")).to_contain_text('"created": true')

    get_form = page.locator('form.channel-try[data-url="/webhook/v1/channels/inbox/threads/:thread"]')
    get_form.locator('input[data-param="thread"]').fill("try-1")
    get_form.locator("button[type=submit]").click()
    expect(get_form.locator(".try-result")).to_contain_text("HTTP 200")
    expect(get_form.locator(".try-result")).to_contain_text('"thread": "try-1"')

    # Bad input comes back as the route's 400, shown as it is.
    post_form.locator("textarea").fill('{"thread": "try-1"}')
    post_form.locator("button[type=submit]").click()
    expect(post_form.locator(".try-result")).to_contain_text("HTTP 400")
    expect(post_form.locator(".try-result")).to_contain_text("body.text")


def test_a_providers_webhook_route_can_be_tried_with_its_headers(page):
    page.goto("/playground/reviewer")
    page.click('details[data-channel="github"] > summary')
    github = page.locator('form.channel-try[data-url="/reviewer/v1/channels/github"]')
    github.locator("button[type=submit]").click()  # the example: a ping, unsigned, from this machine under --dev
    expect(github.locator(".try-result")).to_contain_text("HTTP 200")
    expect(github.locator(".try-result")).to_contain_text('"pong": true')

    github.locator('textarea[name="headers"]').fill('{"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "t-{now}"}')
    github.locator('textarea[name="input"]').fill("not json")
    github.locator("button[type=submit]").click()
    expect(github.locator(".try-result")).to_contain_text("HTTP 400")
    expect(github.locator(".try-result")).to_contain_text("invalid_payload")

    page.click('details[data-channel="slack"] > summary')
    slack = page.locator('form.channel-try[data-url="/reviewer/v1/channels/slack/events"]')
    slack.locator("button[type=submit]").click()
    expect(slack.locator(".try-result")).to_contain_text("HTTP 200")
    expect(slack.locator(".try-result")).to_contain_text("tried-from-the-playground")



def test_save_as_eval_case_downloads_a_case_that_replays_the_first_turn(page, tmp_path):
    start_conversation(page, "support", '/call lookup_order {"order_id": "A100"}')
    expect(page.locator("#status")).to_have_text("waiting")

    with page.expect_download() as download:
        page.click("#eval-case")
    assert download.value.suggested_filename.endswith("_eval.py")
    text = Path(download.value.path()).read_text()
    assert "t.succeeded()" in text and "t.called_tool('lookup_order')" in text

    (tmp_path / "agent").mkdir()
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / download.value.suggested_filename).write_text(text)
    [case] = discover_cases(tmp_path)  # a case file `manage.py eval` takes as it is
    assert case.id == download.value.suggested_filename.removesuffix("_eval.py")
