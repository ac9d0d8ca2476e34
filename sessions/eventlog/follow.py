"""Replay, then follow: a session's event log as a live async iterator.

Delivery apart from generation: workers append events (sessions.eventlog.events),
readers come here. A follower joins the session's shared feed
(sessions.eventlog.feeds), which watches the session's wake-ups, before it reads, so
nothing written between the replay and the subscription is missed. It
replays its own start from the table, then takes each new line from the
feed, which one read per wake-up fills for every follower of the session in
the process; a follower that fell behind the feed's buffer reads the table
itself for the gap. Lines are taken by index from the one after the last
yielded, so no index is repeated or skipped.

The HTTP stream (NDJSON, SSE) and the websocket only translate what this
yields into their formats.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from channels.db import database_sync_to_async

from sessions.eventlog.events import Line, read_lines
from sessions.eventlog.feeds import counts, feeds
from sessions.models import Event, Session

BATCH = 10_000  # events per read: a long replay is a few reads, each one write to the client
ENDED = ("session.completed", "session.failed")  # the end of a task session's stream


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


async def follow_events(session_id: str, start: int, mode: str | None = None) -> AsyncIterator[list[Line]]:
    """Yield the serialized events from `start` on, live, a batch at a time
    (all that one read found), until the caller stops iterating.

    Ends by itself when the session is deleted or a task session has ended.
    `mode`: the session's, when the caller knows it.
    """
    shared = feeds()
    feed = await shared.join(session_id)
    try:
        opening = await _open(session_id, start, mode)
        if opening is None:
            return
        mode, last_type, events = opening.mode, opening.last_type, opening.events
        position, from_table = start, True
        while True:
            if events:
                yield events
                position = events[-1].index + 1
                last_type = events[-1].type
            if from_table and len(events) == BATCH:
                events = await _read(session_id, position)
                continue
            if mode == Session.Mode.TASK and last_type in ENDED:
                return
            feed.start_at(position, last_type)
            while True:
                found = feed.since(position)
                if found is None:  # behind the feed's buffer: the gap from the table
                    counts.gap_reads += 1
                    events, from_table = await _read(session_id, position), True
                    if not events:
                        return  # lines the feed held are gone from the table: the session was deleted
                    break
                if found:
                    events, from_table = found, False
                    break
                if feed.gone:
                    return  # deleted
                await feed.changed()
    finally:
        await shared.leave(feed)
