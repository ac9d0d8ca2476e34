"""A Socket Mode link against a loopback Slack: it opens with the app-level token, hands each
envelope over and acknowledges it once handled, leaves a failed one for Slack to send again, and
backs off while it cannot connect."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Iterator

import pytest

from agents.integrations.slack.client import SlackChannelConfig
from agents.integrations.slack.socket_mode import FIRST_WAIT, SocketModeLink
from tests.channels_app.slack_socket_support import APP_TOKEN, SocketSlack
from tests.channels_app.test_live_slack_channel import wait_for


@pytest.fixture
def fake(settings) -> Iterator[SocketSlack]:
    settings.AGENTSITE_OUTBOUND_ALLOW = "127.0.0.1/32"
    with SocketSlack() as api:
        yield api


def link_to(fake: SocketSlack, handle, token: str | None = APP_TOKEN) -> SocketModeLink:
    config = SlackChannelConfig(socket_mode=True, api_url=fake.api_url,
                                environ={"SLACK_APP_TOKEN": token} if token else {})
    ctx = SimpleNamespace(agent=SimpleNamespace(slug="chatty"), channel_id="slack", acting=contextlib.nullcontext)
    return SocketModeLink(config, handle, ctx)


def attempt(link: SocketModeLink) -> None:
    """One attempt to connect, to its end (it runs on a thread of its own)."""
    link.tick()
    assert link.attempt is not None, "no attempt started"
    link.attempt.join(30)


def test_an_envelope_is_handed_over_then_acknowledged_and_a_failed_one_comes_again(fake):
    handled: list[tuple[str, dict, int]] = []

    def handle(config, ctx, kind, payload):
        handled.append((kind, payload, len(handled)))
        if payload.get("fail") and len(handled) == 1:
            raise RuntimeError("the database went away")
        return "accepted"

    link = link_to(fake, handle)
    attempt(link)
    try:
        assert link.connected and fake.opened == 1
        envelope = fake.send({"fail": True, "event_id": "Ev1"})
        wait_for(lambda: fake.envelopes[envelope].acked_by is not None)
        # Not acknowledged the first time, so sent again (after Slack's three seconds): handled twice.
        assert [(kind, payload["event_id"]) for kind, payload, _ in handled] == [("events_api", "Ev1")] * 2
        assert len(fake.envelopes[envelope].deliveries) == 2
    finally:
        link.close()
    assert not link.connected


def test_a_link_that_cannot_connect_waits_twice_as_long_each_time(fake):
    link = link_to(fake, lambda *args: "ignored", token="xapp-wrong")
    attempt(link)
    assert not link.connected and fake.opened == 0 and link.wait == 2 * FIRST_WAIT
    assert fake.calls("apps.connections.open")  # asked, and refused: invalid_auth
    finished = link.attempt
    link.next_try = float("inf")  # the wait has not passed: no attempt
    link.tick()
    assert link.attempt is finished and len(fake.calls("apps.connections.open")) == 1
    link.next_try = 0
    attempt(link)
    assert link.attempt is not finished and len(fake.calls("apps.connections.open")) == 2 and link.wait == 4 * FIRST_WAIT


def test_without_an_app_token_nothing_is_asked(fake):
    link = link_to(fake, lambda *args: "ignored", token=None)
    attempt(link)
    assert not link.connected and fake.calls("apps.connections.open") == []
