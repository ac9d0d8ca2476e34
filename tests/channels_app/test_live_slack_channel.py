"""A Slack channel on a real server (`manage.py serve`, SQLite): signed Events API
and interactivity requests over HTTP, the background work and replies on the
django-q2 workers, and everything Slack would show arriving at a loopback fake
of its Web API."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from tests.support import Server, run_server

from .slack_support import (
    ADA, BOB, GUEST, SECRET, TEAM, TOKEN, FakeSlack, click, message_event, signed_headers,
)
from .test_custom_channels import REFUND_TOOL

pytestmark = pytest.mark.timeout(240)

CHANNEL = 'from agents.sdk import slack_channel\n\nchannel = slack_channel(engagement="threads")\n'


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as api:
        yield api


@pytest.fixture(scope="module")
def server(fake, tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    base = agents / "chatty" / "agent"
    (base / "channels").mkdir(parents=True)
    (base / "tools").mkdir()
    (base / "instructions.md").write_text("Echo.\n")
    (base / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo", tools=[])\n')
    (base / "tools" / "refund.py").write_text(REFUND_TOOL)
    (base / "channels" / "slack.py").write_text(CHANNEL)
    env = {"SLACK_SIGNING_SECRET": SECRET, "SLACK_BOT_TOKEN": TOKEN, "SLACK_API_URL": fake.api_url,
           "AGENTSITE_OUTBOUND_ALLOW": "127.0.0.1/32"}
    with run_server(tmp_path_factory.mktemp("slack-state"), "--agents", str(agents), "--no-examples",
                    env=env) as server:
        yield server


def post(server: Server, body: dict | bytes, *, route: str = "events", headers: dict[str, str] | None = None,
         **extra: str) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    content_type = "application/x-www-form-urlencoded" if route == "interactivity" else "application/json"
    with server.client() as client:
        return client.post(f"/chatty/v1/channels/slack/{route}", content=raw,
                           headers={"Content-Type": content_type, **(signed_headers(raw) if headers is None
                                                                        else headers), **extra})


def wait_for(what: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def sessions(server: Server) -> list[tuple[str, str, int]]:
    """(id, principal, turns) of the server's Slack sessions, read from its database."""
    db = Path(server.state_root) / "db.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        session_table = next(t for t in tables if t.endswith("_session") and t.startswith("agent_sessions"))
        turn_table = next(t for t in tables if t.endswith("_turn") and t.startswith("agent_sessions"))
        return conn.execute(
            f"SELECT s.id, s.principal_id, (SELECT COUNT(*) FROM {turn_table} t WHERE t.session_id = s.id) "
            f"FROM {session_table} s WHERE s.channel = 'slack' ORDER BY s.created_at").fetchall()


def test_old_and_forged_requests_get_401_and_slacks_url_check_its_challenge(server):
    check = json.dumps({"token": "t", "challenge": "live-challenge", "type": "url_verification"}).encode()

    old = post(server, check, headers=signed_headers(check, timestamp=int(time.time()) - 600))
    forged = post(server, check, headers=signed_headers(check, secret="wrong"))
    answered = post(server, check)

    assert old.status_code == 401 and "too old" in old.json()["error"]["message"]
    assert forged.status_code == 401 and forged.json()["error"]["code"] == "invalid_signature"
    assert answered.status_code == 200 and answered.json() == {"challenge": "live-challenge"}


def test_a_mention_is_answered_in_its_thread_and_a_reply_there_continues_the_session(server, fake):
    started = time.monotonic()
    response = post(server, message_event("is the deploy safe to retry?", ts="1712340001.000100"))

    assert response.status_code == 200 and time.monotonic() - started < 3
    assert wait_for(lambda: fake.replies("1712340001.000100")) == ["You said: is the deploy safe to retry?"]

    post(server, message_event("and the invoices?", ts="1712340001.000200", thread_ts="1712340001.000100",
                               kind="message"))

    wait_for(lambda: len(fake.replies("1712340001.000100")) == 2)
    assert fake.replies("1712340001.000100") == ["You said: is the deploy safe to retry?",
                                                 "You said: and the invoices?"]
    [(_, principal, turns)] = [s for s in sessions(server)]
    assert principal == f"slack:{TEAM}:{ADA}" and turns == 2


def test_a_retried_event_starts_nothing_new(server, fake):
    event = message_event("just once", ts="1712340002.000100", event_id="Ev0LIVERETRY")
    body = json.dumps(event).encode()

    first = post(server, body)
    wait_for(lambda: fake.replies("1712340002.000100"))
    retried = post(server, body, headers=signed_headers(body, timestamp=int(time.time()) + 2),
                   **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    time.sleep(2)

    assert first.json()["outcome"] == "accepted"
    assert retried.status_code == 200 and retried.json()["outcome"] == "duplicate"
    assert fake.replies("1712340002.000100") == ["You said: just once"]


def test_a_guest_is_not_answered(server, fake):
    post(server, message_event("hello from a guest", ts="1712340003.000100", user=GUEST))
    # A message sent after it is answered: by then the guest's was looked at too, by some worker.
    post(server, message_event("hello from ada", ts="1712340003.000200"))
    wait_for(lambda: fake.replies("1712340003.000200"))
    time.sleep(2)

    assert fake.in_thread("1712340003.000100") == []
    assert any(r.path == "/api/users.info" and GUEST in (r.body.decode() + str(r.query)) for r in fake.requests)


def test_only_the_threads_starter_can_approve_a_parked_call(server, fake):
    post(server, message_event('/call refund {"order_id": "A1"}', ts="1712340004.000100"))
    [card] = wait_for(lambda: fake.cards("1712340004.000100"))
    approve = click(card, user=ADA)

    refused = post(server, click(card, user=BOB), route="interactivity")

    assert refused.status_code == 200
    assert wait_for(lambda: [e for e in fake.ephemeral if e["user"] == BOB])
    time.sleep(1.5)
    assert fake.messages[card.ts].edits == 0 and fake.replies("1712340004.000100") == []

    approved = post(server, approve, route="interactivity")

    assert approved.status_code == 200
    wait_for(lambda: fake.messages[card.ts].edits == 1 and fake.replies("1712340004.000100"))
    assert fake.messages[card.ts].text == "Approved: refund"
    [summary] = fake.replies("1712340004.000100")
    assert "refund" in summary
