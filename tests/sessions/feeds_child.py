"""The scenarios of tests/sessions/test_feeds.py, run in a child process on one real database.

`python -c "...main()" <agent folder> <group>...` migrates, deploys the agent,
then runs each group's scenarios on an event loop of its own (so feeds of its own),
with the group's polls, as a web process runs its streams: followers are
`follow_events` iterators, writers append from threads through `append_events` (so
each append is its own commit and sends its wake-up as a worker's does). It prints
one JSON object: per group and scenario what each follower received and what the
feeds cost (sessions.eventlog.feeds.counts).
Every wait is bounded: a follower that never gets its events fails the
scenario instead of hanging.
"""
from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction

import sessions.eventlog.feeds
from agents.discovery import deploy_agent_folder
from sessions.retention.deletion import delete_session
from sessions.eventlog.events import append_events
from sessions.eventlog.feeds import counts
from sessions.eventlog.follow import follow_events
from sessions.models import Event, EventType, Session
from sessions.sql.events import allocate, insert_events

WAIT = 30.0
_deployment: list = []


def new_session(events: int = 2) -> str:
    deployment = _deployment[0]
    session = Session.objects.create(agent_id=deployment.agent_id, deployment=deployment, principal_id="alice",
                                     authenticator="bearer")
    append_events(session.id, [(EventType.MESSAGE_APPENDED, {"delta": f"before {i}"}) for i in range(events)])
    return session.id


def append_one(session_id: str, text: str) -> int:
    return append_events(session_id, [(EventType.MESSAGE_APPENDED, {"delta": text})])[0].index


def append_unannounced(session_id: str, text: str) -> int:
    """An append whose wake-up is lost: the event's rows, without the announce (sessions.eventlog.events)."""
    with transaction.atomic():
        first = allocate(session_id, 1).first
        insert_events([Event(session_id=session_id, index=first, type=EventType.MESSAGE_APPENDED,
                             data={"delta": text}, turn_id="")])
    return first


class Follower:
    """One stream: what it received, a batch at a time; `pause` holds it between batches."""

    def __init__(self, session_id: str, start: int):
        self.session_id, self.start = session_id, start
        self.indexes: list[int] = []
        self.texts: list[str] = []
        self.ended = False
        self.pause = asyncio.Event()
        self.pause.set()
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        async for batch in follow_events(self.session_id, self.start):
            for line in batch:
                self.indexes.append(line.index)
                self.texts.append(json.loads(line.json)["data"].get("delta", ""))
            await self.pause.wait()
        self.ended = True

    async def reached(self, index: int) -> None:
        async def until() -> None:
            while not self.indexes or self.indexes[-1] < index:
                await asyncio.sleep(0.01)
        await asyncio.wait_for(until(), WAIT)

    async def close(self) -> dict[str, Any]:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        return {"start": self.start, "indexes": self.indexes, "ended": self.ended}


async def reads_settled(quiet: float = 0.5) -> None:
    """Until the feeds made no read for `quiet` seconds (wake-ups still on their way have been read)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while asyncio.get_running_loop().time() < deadline:
        before = counts.feed_reads
        await asyncio.sleep(quiet)
        if counts.feed_reads == before:
            return


def reset_counts() -> None:
    counts.feed_reads = counts.gap_reads = counts.net_reads = 0


async def many_followers() -> dict[str, Any]:
    """50 followers of one session at three start indexes; 20 events appended one commit at a time."""
    session_id = await asyncio.to_thread(new_session, 3)
    followers = [Follower(session_id, n % 3) for n in range(50)]
    await asyncio.gather(*(f.reached(2) for f in followers))
    reset_counts()
    last = 0
    for n in range(20):
        last = await asyncio.to_thread(append_one, session_id, f"live {n}")
        await asyncio.gather(*(f.reached(last) for f in followers))
    out = {"last": last, "counts": asdict(counts), "appends": 20}
    out["followers"] = [await f.close() for f in followers]
    return out


async def slow_follower() -> dict[str, Any]:
    """A follower held while more events arrive than the feed keeps, beside one that keeps up."""
    sessions.eventlog.feeds.BUFFER = 5
    try:
        session_id = await asyncio.to_thread(new_session, 2)
        fast, slow = Follower(session_id, 0), Follower(session_id, 0)
        await asyncio.gather(fast.reached(1), slow.reached(1))
        reset_counts()
        slow.pause.clear()
        await asyncio.to_thread(append_one, session_id, "first")  # the slow one takes this batch, then holds
        last = 0
        for n in range(30):
            last = await asyncio.to_thread(append_one, session_id, f"more {n}")
        await fast.reached(last)
        slow.pause.set()
        await slow.reached(last)
        return {"last": last, "counts": asdict(counts), "followers": [await fast.close(), await slow.close()]}
    finally:
        sessions.eventlog.feeds.BUFFER = 1000


async def deleted_while_followed() -> dict[str, Any]:
    session_id = await asyncio.to_thread(new_session, 2)
    followers = [Follower(session_id, 0) for _ in range(3)]
    await asyncio.gather(*(f.reached(1) for f in followers))
    session = await asyncio.to_thread(Session.objects.get, pk=session_id)
    await asyncio.to_thread(delete_session, session)
    await asyncio.wait_for(asyncio.gather(*(f.task for f in followers)), WAIT)
    return {"followers": [await f.close() for f in followers]}


async def listener_killed() -> dict[str, Any]:
    """PostgreSQL: the listening connection is killed; events appended meanwhile still arrive."""
    session_id = await asyncio.to_thread(new_session, 2)
    follower = Follower(session_id, 0)
    await follower.reached(1)

    def kill() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND query LIKE 'LISTEN%%'")
            return len(cursor.fetchall())
    killed = await asyncio.to_thread(kill)
    last = 0
    for n in range(3):
        last = await asyncio.to_thread(append_one, session_id, f"while away {n}")
    await follower.reached(last)
    return {"killed": killed, "last": last, "followers": [await follower.close()]}


async def lost_wakeups() -> dict[str, Any]:
    """Events whose wake-ups never come, on an idle and on a busy session: the safety net finds them."""
    quiet, busy = await asyncio.gather(asyncio.to_thread(new_session, 2), asyncio.to_thread(new_session, 2))
    followers = [Follower(quiet, 0), Follower(quiet, 1), Follower(busy, 0)]
    await asyncio.gather(*(f.reached(1) for f in followers))
    await reads_settled()  # a wake-up of the sessions' first events, late on a busy machine, would find them too
    reset_counts()
    last_quiet = await asyncio.to_thread(append_unannounced, quiet, "unannounced")
    last_busy = 0
    for n in range(3):
        last_busy = await asyncio.to_thread(append_unannounced, busy, f"unannounced {n}")
    await asyncio.gather(followers[0].reached(last_quiet), followers[1].reached(last_quiet),
                         followers[2].reached(last_busy))
    return {"last": [last_quiet, last_quiet, last_busy], "counts": asdict(counts),
            "followers": [await f.close() for f in followers]}


GROUPS = {
    "hinted": [many_followers, slow_follower, deleted_while_followed, listener_killed],
    "unhinted": [lost_wakeups],
}
# Polls far apart (60 s) where the wake-ups are what is tested; the safety net close (0.3 s) where they are lost.
POLLS = {"hinted": {"AGENTSITE_STREAM_POLL_RUNNING": 60.0, "AGENTSITE_STREAM_POLL_IDLE": 60.0},
         "unhinted": {"AGENTSITE_STREAM_POLL_RUNNING": 60.0, "AGENTSITE_STREAM_POLL_IDLE": 0.3}}


async def run_group(group: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for scenario in GROUPS[group]:
        if scenario is listener_killed and connection.vendor != "postgresql":
            continue
        out[scenario.__name__] = await scenario()
    return out


def main() -> None:
    call_command("migrate", verbosity=0)
    _deployment.append(deploy_agent_folder(sys.argv[1]))
    out = {}
    for group in sys.argv[2:]:
        for name, seconds in POLLS[group].items():
            setattr(settings, name, seconds)
        out[group] = asyncio.run(run_group(group))
    print(json.dumps(out))
