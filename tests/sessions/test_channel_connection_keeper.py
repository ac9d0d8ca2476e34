"""The keeper of channels' connections (sessions.custom_channels.connections), two of them as two
processes would run them on one database: one holds and ticks the connection, the other takes it
over once the lease lapses and the first closes its own; a release without the channel closes it
and gives the lease up."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from sessions.custom_channels.connections import CLAIM, Keeper
from sessions.models import ChannelConnection

from tests.channels_app.test_custom_channels import write_agent

pytestmark = pytest.mark.django_db

LINK = '''\
from agents.sdk import Channel

NOTES = {notes!r}


class Link:
    def __init__(self, ctx):
        self.connected = True
        self.note("open " + ctx.agent.slug + "/" + ctx.channel_id)

    def note(self, what):
        with open(NOTES, "a") as notes:
            notes.write(what + "\\n")

    def tick(self):
        self.note("tick")

    def close(self):
        self.note("close")


channel = Channel(connection=Link)
'''


def notes(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def folder(tmp_path) -> tuple[Path, Path]:
    log = tmp_path / "notes.txt"
    return write_agent(tmp_path / "linked", {"feed": LINK.format(notes=str(log))}), log


def test_one_keeper_holds_the_connection_and_the_other_takes_it_over_when_its_lease_lapses(folder):
    root, log = folder
    agent = deploy_agent_folder(root).agent
    first, second = Keeper("host-a:1:x"), Keeper("host-b:2:y")
    for keeper in (first, second):
        keeper.scan()
    [held] = first.kept.values()
    [waiting] = second.kept.values()

    first.keep(held, 100.0)
    second.keep(waiting, 100.0)
    assert notes(log) == ["open linked/feed", "tick"]
    row = ChannelConnection.objects.get(agent=agent, channel="feed")
    assert row.holder == "host-a:1:x" and row.connected_at is not None

    # The first stalls past its lease: the second claims it at its next try, and the first, at
    # its next renewal, finds it gone and closes its connection.
    ChannelConnection.objects.filter(pk=row.pk).update(held_until=timezone.now() - timedelta(seconds=1))
    second.keep(waiting, 100.0 + CLAIM)
    first.keep(held, 100.0 + 60)
    assert notes(log) == ["open linked/feed", "tick", "open linked/feed", "tick", "close"]
    assert ChannelConnection.objects.get(pk=row.pk).holder == "host-b:2:y" and held.link is None


def test_a_release_without_the_channel_closes_the_connection_and_gives_the_lease_up(folder, tmp_path):
    root, log = folder
    agent = deploy_agent_folder(root).agent
    keeper = Keeper("host-a:1:x")
    keeper.scan()
    [held] = keeper.kept.values()
    keeper.keep(held, 100.0)

    (root / "agent" / "channels" / "feed.py").unlink()
    deploy_agent_folder(root)
    keeper.scan()

    assert notes(log)[-1] == "close" and keeper.kept == {}
    row = ChannelConnection.objects.get(agent=agent, channel="feed")
    assert row.held_until is None and row.connected_at is None
