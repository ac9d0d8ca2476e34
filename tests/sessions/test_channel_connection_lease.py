"""The lease on a channel's connection (ChannelConnection): one holder at a time, taken over once
it lapses or is given up, and a holder that lost it cannot renew it."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Agent
from sessions.models import ChannelConnection

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent() -> Agent:
    return Agent.objects.create(slug="chatty")


def test_one_process_holds_it_until_its_lease_lapses(agent):
    now = timezone.now()
    later = now + timedelta(seconds=10)

    assert ChannelConnection.claim(agent.pk, "slack", "host-a:1:x", now, later)
    assert not ChannelConnection.claim(agent.pk, "slack", "host-b:2:y", now + timedelta(seconds=5), later)
    assert ChannelConnection.mark_connected(agent.pk, "slack", "host-a:1:x", now)
    # Its own again (its connection closed for a new release): held, and not connected until it opens.
    assert ChannelConnection.claim(agent.pk, "slack", "host-a:1:x", now + timedelta(seconds=5), later)
    assert ChannelConnection.objects.get(agent=agent, channel="slack").connected_at is None
    assert ChannelConnection.renew(agent.pk, "slack", "host-a:1:x", later + timedelta(seconds=10))

    lapsed = later + timedelta(seconds=11)
    assert ChannelConnection.claim(agent.pk, "slack", "host-b:2:y", lapsed, lapsed + timedelta(seconds=10))
    assert not ChannelConnection.renew(agent.pk, "slack", "host-a:1:x", lapsed + timedelta(seconds=10))
    assert not ChannelConnection.mark_connected(agent.pk, "slack", "host-a:1:x", lapsed)
    row = ChannelConnection.objects.get(agent=agent, channel="slack")
    assert (row.holder, row.held_since, row.connected_at) == ("host-b:2:y", lapsed, None)


def test_a_lease_given_up_is_taken_at_once_and_channels_are_leased_apart(agent):
    now = timezone.now()
    until = now + timedelta(seconds=10)
    assert ChannelConnection.claim(agent.pk, "slack", "host-a:1:x", now, until)
    assert ChannelConnection.claim(agent.pk, "other", "host-b:2:y", now, until)
    assert ChannelConnection.mark_connected(agent.pk, "slack", "host-a:1:x", now)

    assert not ChannelConnection.release(agent.pk, "slack", "host-b:2:y")  # not its to give up
    assert ChannelConnection.release(agent.pk, "slack", "host-a:1:x")
    assert ChannelConnection.claim(agent.pk, "slack", "host-b:2:y", now, until)
    assert ChannelConnection.objects.filter(agent=agent).count() == 2
