"""Slack in Socket Mode on a real `manage.py serve`, against a loopback Slack: its Web API opens a
loopback websocket that sends envelopes and resends those not acknowledged in time.

The embedded default (SQLite) holds a conversation over the socket: threads, a redelivery, a guest,
approvals, a refreshed connection. Two servers on one PostgreSQL + Redis elect one holder; it is
killed mid-conversation and the other server takes over, with no event handled twice or lost.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Iterator

import pytest

from tests.server_database import on_server_database
from tests.support import Server, backend_env, run_server

from .slack_socket_support import APP_TOKEN, SocketSlack
from .slack_support import ADA, BOB, GUEST, TEAM, TOKEN, click_payload, message_event
from .test_custom_channels import write_agent
from .test_live_slack_channel import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]

CHANNEL = 'from agents.sdk import slack_channel\n\nchannel = slack_channel(engagement="threads", socket_mode=True)\n'


def agents_folder(root) -> str:
    return str(write_agent(root / "chatty", {"slack": CHANNEL}))


def slack_env(fake: SocketSlack) -> dict[str, str]:
    # No signing secret: Socket Mode needs none.
    return {"SLACK_BOT_TOKEN": TOKEN, "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_API_URL": fake.api_url,
            "AGENTSITE_OUTBOUND_ALLOW": "127.0.0.1/32"}


def acknowledged(fake: SocketSlack, *ids: str) -> bool:
    return all(fake.envelopes[i].acked_by is not None for i in ids)


def slack_sessions(state_root, blocker, env) -> list[tuple[str, list[str]]]:
    """(principal, the message of each of its turns) of each Slack session, oldest first."""
    from sessions.models import Session

    with on_server_database(state_root, blocker, env):
        return [(session.principal_id, list(session.turns.order_by("created_at").values_list("message", flat=True)))
                for session in Session.objects.filter(channel="slack").order_by("created_at")]


def holder(state_root, blocker, env) -> tuple[str, bool]:
    """Who holds the channel's connection, and whether it is up."""
    from sessions.models import ChannelConnection

    with on_server_database(state_root, blocker, env):
        row = ChannelConnection.objects.filter(channel="slack").first()
        if row is None or row.held_until is None:
            return "", False
        return row.holder, row.connected_at is not None


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, django_db_blocker) -> Iterator[tuple[SocketSlack, Server]]:
    with SocketSlack() as fake, run_server(tmp_path_factory.mktemp("socket-state"), "--no-schedules",
                                           "--no-examples", "--agents", agents_folder(tmp_path_factory.mktemp("agents")),
                                           env=slack_env(fake)) as server:
        # Up once the keeper has seen its connection open (a tick after it opened).
        wait_for(lambda: fake.open_links() and holder(server.state_root, django_db_blocker, {})[1])
        yield fake, server


def test_a_conversation_over_the_socket_threads_redeliveries_and_guests(embedded, django_db_blocker):
    fake, server = embedded
    first = fake.send(message_event("is the deploy safe to retry?", ts="1712350001.000100", event_id="EvSOCKET1"))
    wait_for(lambda: fake.replies("1712350001.000100"))
    in_thread = fake.send(message_event("and the invoices?", ts="1712350001.000200",
                                        thread_ts="1712350001.000100", kind="message"))
    again = fake.send(message_event("is the deploy safe to retry?", ts="1712350001.000100", event_id="EvSOCKET1"))
    guest = fake.send(message_event("hello from a guest", ts="1712350001.000300", user=GUEST))
    wait_for(lambda: len(fake.replies("1712350001.000100")) == 2 and acknowledged(fake, again, guest))

    assert acknowledged(fake, first, in_thread)
    assert fake.replies("1712350001.000100") == ["You said: is the deploy safe to retry?",
                                                 "You said: and the invoices?"]
    assert fake.in_thread("1712350001.000300") == []
    [(principal, said)] = slack_sessions(server.state_root, django_db_blocker, {})
    assert principal == f"slack:{TEAM}:{ADA}" and said == ["is the deploy safe to retry?", "and the invoices?"]
    # Socket Mode serves no request URLs: Slack reaches the server only through its own socket.
    with server.client() as client:
        assert client.post("/chatty/v1/channels/slack/events", json={}).status_code == 404
        described = client.get("/chatty/v1/info").json()
        # The loopback caller sits at the server, so it is an operator: every session is listed.
        listed = client.get("/playground/chatty?all=1").text
    assert '<td class="channel">slack</td>' in listed
    [slack] = [c for c in described["channels"] if c["id"] == "slack"]
    assert slack["routes"] == [] and slack["connection"]["connected"]
    assert slack["config"]["socketMode"] and slack["config"]["appTokenEnv"] == {"env": "SLACK_APP_TOKEN", "set": True}


def test_an_approval_card_is_decided_over_the_socket_by_the_threads_starter(embedded):
    fake, _ = embedded
    fake.send(message_event('/call refund {"order_id": "A1"}', ts="1712350002.000100"))
    [card] = wait_for(lambda: fake.cards("1712350002.000100"))

    refused = fake.send(click_payload(card, user=BOB), kind="interactive")
    assert wait_for(lambda: [e for e in fake.ephemeral if e["user"] == BOB])
    assert acknowledged(fake, refused) and fake.messages[card.ts].edits == 0

    click = click_payload(card, user=ADA)
    approved = fake.send(click, kind="interactive")
    wait_for(lambda: fake.messages[card.ts].edits == 1 and fake.replies("1712350002.000100"))
    assert acknowledged(fake, approved) and fake.messages[card.ts].text == "Approved: refund"
    # The same click again (its acknowledgement lost): taken once, and Ada is not told it was decided.
    again = fake.send(click, kind="interactive")
    wait_for(lambda: acknowledged(fake, again))
    time.sleep(1.5)  # a message to Ada would be on its way by now
    assert [e for e in fake.ephemeral if e["user"] == ADA] == []


def test_a_refreshed_connection_moves_to_a_new_address_and_misses_nothing(embedded):
    fake, _ = embedded
    before = {link.number for link in fake.open_links()}
    fake.refresh()
    wait_for(lambda: {link.number for link in fake.open_links()} - before)
    sent = fake.send(message_event("still there?", ts="1712350003.000100"))
    assert wait_for(lambda: fake.replies("1712350003.000100")) == ["You said: still there?"]
    assert acknowledged(fake, sent)


@pytest.fixture(scope="module")
def scaled_out(tmp_path_factory) -> Iterator[tuple[SocketSlack, list[Server], dict[str, str]]]:
    """Two servers (two hosts, as far as they know) on one PostgreSQL database and one Redis."""
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(SocketSlack())
        # A shorter lease than the default 10 s, so a takeover is quicker to watch.
        env = {**backend_env(stack, "postgres+redis", migrated=True), **slack_env(fake),
               "AGENTSITE_CHANNEL_LEASE_SECONDS": "6"}
        agents = agents_folder(tmp_path_factory.mktemp("agents"))
        servers = [stack.enter_context(run_server(tmp_path_factory.mktemp(f"socket-host{n}"), "--no-schedules",
                                                  "--no-examples", "--agents", agents, env=env)) for n in (1, 2)]
        yield fake, servers, env


def test_the_holder_killed_mid_conversation_is_taken_over_with_nothing_lost_or_repeated(
        scaled_out, django_db_blocker):
    fake, servers, env = scaled_out
    root = servers[0].state_root
    thread = "1712350010.000100"
    held_by, _ = wait_for(lambda: (found := holder(root, django_db_blocker, env))[1] and found)
    [first_link] = fake.open_links()  # two servers, one connection
    fake.send(message_event("message 1", ts=thread))
    wait_for(lambda: fake.replies(thread))

    # Killed as its next envelopes arrive: they may be handled, acknowledged, or neither.
    sent = [fake.send(message_event(f"message {n}", ts=f"1712350010.00{n}000", thread_ts=thread, kind="message"))
            for n in (2, 3)]
    os.kill(int(held_by.split(":")[1]), signal.SIGKILL)
    sent += [fake.send(message_event(f"message {n}", ts=f"1712350010.00{n}000", thread_ts=thread, kind="message"))
             for n in (4, 5)]

    taken_by, _ = wait_for(lambda: (found := holder(root, django_db_blocker, env))[1]
                           and found[0] != held_by and found, timeout=90)
    wait_for(lambda: acknowledged(fake, *sent) and len(fake.replies(thread)) >= 5, timeout=90)
    time.sleep(2)  # a second copy of any of them would have been answered by now

    assert taken_by.split(":")[1] != held_by.split(":")[1]
    assert all(fake.envelopes[i].acked_by != first_link.number for i in sent[2:])
    # The envelopes are handled side by side, so their turns may queue in any order: each once.
    expected = [f"message {n}" for n in range(1, 6)]
    assert sorted(fake.replies(thread)) == [f"You said: {m}" for m in expected]
    [(_, said)] = slack_sessions(root, django_db_blocker, env)
    assert sorted(said) == expected
    assert len(fake.open_links()) == 1

