"""Replay, then follow: a session's event log as a live async iterator.

Delivery apart from generation: workers append events (sessions.events),
readers come here. The reader subscribes to the session's wake-ups (sessions.wakeups)
before it reads, so nothing written between the replay and the
subscription is missed; after every wake-up or poll timeout it reads the
table again from the next index it has not yielded, so it never repeats or
skips an index. It polls fast while a turn runs (a worker in another
process may not be able to wake it) and slowly while the session is idle.

The HTTP stream (NDJSON, SSE) and the websocket only translate what this
yields into their formats.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import AsyncIterator

from channels.db import database_sync_to_async
from django.conf import settings

from sessions import wakeups
from sessions.events import TERMINAL_TYPES, Line, read_lines
from sessions.models import Event, Session

# After a wake-up, poll fast for a while even if the log looks idle: a
# follow-up was just admitted and its turn has not written anything yet.
FAST_AFTER_WAKEUP_SECONDS = 2.0
BATCH = 10_000  # events per read: a long replay is a few reads, each one write to the client


@dataclass
class Opening:
    """Where a reader starts: the session's mode, the type of the event before
    the start (how a reader resumed past the end knows the session is idle
    or over) and the first batch of events."""
    mode: str
    last_type: str
    events: list[Line]


def open_log(session_id: str, start: int, mode: str | None = None) -> Opening | None:
    """Everything a reader needs to begin, in one trip to a thread; None if the session is gone.

    A caller that already read the session's `mode` (with its access check) passes it.
    """
    if mode is None:
        mode = Session.objects.filter(pk=session_id).values_list("mode", flat=True).first()
        if mode is None:
            return None
    last_type = ""
    if start > 0:
        earlier = Event.objects.filter(session_id=session_id, index__lt=start).order_by("-index")
        last_type = earlier.values_list("type", flat=True).first() or ""
    return Opening(mode, last_type, read_lines(session_id, start, BATCH))


_open = database_sync_to_async(open_log)


@database_sync_to_async
def _read(session_id: str, start: int) -> list[Line]:
    return read_lines(session_id, start, BATCH)


@database_sync_to_async
def _exists(session_id: str) -> bool:
    return Session.objects.filter(pk=session_id).exists()


async def follow_events(session_id: str, start: int, mode: str | None = None) -> AsyncIterator[list[Line]]:
    """Yield the serialized events from `start` on, live, a batch at a time
    (all that one read found), until the caller stops iterating.

    Ends by itself when the session is deleted or a task session has ended.
    `mode`: the session's, when the caller knows it.
    """
    subscription = await wakeups.subscribe(session_id)
    try:
        opening = await _open(session_id, start, mode)
        if opening is None:
            return
        mode, last_type, events = opening.mode, opening.last_type, opening.events
        next_index = start
        fast_until = 0.0
        next_gone_check = 0.0
        while True:
            if events:
                yield events
                next_index = events[-1].index + 1
                last_type = events[-1].type
            if len(events) == BATCH:
                events = await _read(session_id, next_index)
                continue
            if mode == Session.Mode.TASK and last_type in ("session.completed", "session.failed"):
                return
            idle = last_type in TERMINAL_TYPES and time.monotonic() > fast_until
            timeout = settings.AGENTSITE_STREAM_POLL_IDLE if idle else settings.AGENTSITE_STREAM_POLL_RUNNING
            woke = await subscription.wait(timeout)
            if woke:
                fast_until = time.monotonic() + FAST_AFTER_WAKEUP_SECONDS
            elif woke is None:
                await asyncio.sleep(timeout)  # wake-ups are hints: keep polling the table, at the poll pace
            else:
                # A session deleted mid-turn never writes a terminal event, so look
                # for deletion while running too, but no oftener than the idle poll.
                now = time.monotonic()
                if idle or now >= next_gone_check:
                    next_gone_check = now + settings.AGENTSITE_STREAM_POLL_IDLE
                    if not await _exists(session_id):
                        return  # deleted
            events = await _read(session_id, next_index)
    finally:
        await subscription.close()
