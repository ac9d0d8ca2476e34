"""Shared feeds: one per followed session and process, read once for all its followers.

A web process may hold a thousand open streams. Each follower reading the
event table after every wake-up (and polling it while idle) cost a query per
follower per wake-up, and CPU for every idle stream. Here instead:

- The first follower of a session in a process opens the session's `Feed`,
  which watches the session's wake-ups (sessions.eventlog.wakeups) before that
  follower's first read, so nothing written after it goes unannounced; the
  last follower leaving closes it.
- A wake-up marks the feed; the process's `Reader` drains the marked feeds,
  many sessions per query (sessions.sql.feeds.feed_lines), and appends what
  it found to each feed's buffer: the most recent lines, with contiguous
  indexes. Followers take their lines from the buffer; one that fell behind
  it (a slow client) reads the table itself for the gap.
- Idle feeds cost nothing: no follower polls. A process-wide safety net
  reads every feed's session row each AGENTSITE_STREAM_POLL_IDLE seconds, in
  batches: a session with events past what its feed holds is read, a
  deleted one ends its followers. Only where a transport can drop hints (the
  channel layer and its doorbells, not PostgreSQL's NOTIFY) does a feed
  whose session is running also poll, once per feed (a timer, or the
  layer's receive timing out), every AGENTSITE_STREAM_POLL_RUNNING seconds.

The event table stays the source of truth and wake-ups stay hints: a feed
only ever appends the lines that follow the last one it holds, as read from
the table, so no index is lost, repeated or reordered.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import weakref
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings

from sessions.eventlog import wakeups
from sessions.eventlog.events import TERMINAL_TYPES, Line
from sessions.models import Session
from sessions.sql.feeds import feed_lines

log = logging.getLogger(__name__)

BUFFER = 1000  # lines a feed keeps; also the most one read takes of one session
READ_SESSIONS = 200  # sessions per query
TIPS_SESSIONS = 500  # sessions per safety-net query
# After a wake-up, poll fast for a while even if the log looks idle: a
# follow-up was just admitted and its turn has not written anything yet.
FAST_AFTER_WAKEUP_SECONDS = 2.0


@dataclass
class Counts:
    """What this process's feeds cost the database, for tests and benchmarks."""
    feed_reads: int = 0  # queries of the reader (each covers up to READ_SESSIONS feeds)
    gap_reads: int = 0  # reads of followers that fell behind their feed's buffer
    net_reads: int = 0  # safety-net queries


counts = Counts()


class Feed:
    """The recent lines of one session, shared by its followers in this process."""

    def __init__(self, session_id: str, feeds: Feeds):
        self.session_id, self.feeds = session_id, feeds
        self.lines: list[Line] = []  # contiguous indexes, the last one next_index - 1
        self.next_index: int | None = None  # unknown until the first follower has read the table
        self.last_type = ""
        self.followers = 0
        self.gone = False
        self.check_gone = False  # a deletion hint came: the reader looks at the row
        self.fast_until = 0.0
        self.watching: asyncio.Future = asyncio.get_running_loop().create_future()
        self.watch: wakeups.NotifyWatch | wakeups.LocalWatch | wakeups.LayerWatch | None = None
        self._waiters: list[asyncio.Future] = []

    # --- the followers' side
    def start_at(self, index: int, last_type: str) -> None:
        """A follower has read the table up to `index` (the line before it of `last_type`):
        the feed's start, if it has none yet."""
        if self.next_index is None:
            self.next_index, self.last_type = index, last_type
            self.feeds.reader.mark(self)  # wake-ups that came before had nothing to read from

    def since(self, index: int) -> list[Line] | None:
        """The buffered lines from `index` on ([] if none yet); None if the buffer no longer reaches back to it."""
        if self.next_index is None or index >= self.next_index:
            return []
        first = self.next_index - len(self.lines)
        if index < first:
            return None
        return self.lines[index - first:]

    async def changed(self) -> None:
        """Until lines are added or the session is found deleted."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if not waiter.done():
                waiter.cancel()

    # --- the reader's side
    def hint(self, index: int | None) -> None:
        """A wake-up (`index`), or a poll timeout (None)."""
        if index is not None:
            self.fast_until = time.monotonic() + FAST_AFTER_WAKEUP_SECONDS
            if index == wakeups.DELETED:
                self.check_gone = True
            elif self.next_index is not None and 0 <= index < self.next_index:
                return  # a hint for lines a read already brought (it came while that read ran)
        self.feeds.reader.mark(self)

    def poll_after(self) -> float | None:
        """The poll of a transport that can drop hints: while the session runs, else none (the safety net)."""
        running = self.last_type not in TERMINAL_TYPES or time.monotonic() < self.fast_until
        return settings.AGENTSITE_STREAM_POLL_RUNNING if running else None

    def add(self, lines: list[Line]) -> None:
        lines = [line for line in lines if line.index >= self.next_index]
        if not lines:
            return
        if lines[0].index != self.next_index:  # never: the table has no gaps; read again rather than skip
            self.feeds.reader.mark(self)
            return
        self.lines.extend(lines)
        if len(self.lines) > BUFFER:
            del self.lines[:len(self.lines) - BUFFER]
        self.next_index = lines[-1].index + 1
        self.last_type = lines[-1].type
        self._wake()

    def end(self) -> None:
        self.gone = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class Reader:
    """Reads the marked feeds of a process, many sessions per query, one query at a time:
    wake-ups that arrive during a read are served together by the next one."""

    def __init__(self) -> None:
        self.marked: dict[Feed, None] = {}  # ordered: the longest waiting first
        self.bell = asyncio.Event()
        self.task: asyncio.Task | None = None

    def mark(self, feed: Feed) -> None:
        self.marked[feed] = None
        self.bell.set()
        if self.task is None or self.task.done():
            self.task = _background(self.run(), "feed-reader")

    async def run(self) -> None:
        while True:
            await self.bell.wait()
            self.bell.clear()
            while self.marked:
                batch: list[Feed] = []
                for feed in list(self.marked):
                    del self.marked[feed]
                    if feed.followers and not feed.gone and feed.next_index is not None:
                        batch.append(feed)
                        if len(batch) == READ_SESSIONS:
                            break
                if batch:
                    await self.read(batch)

    async def read(self, batch: list[Feed]) -> None:
        starts = [(feed.session_id, feed.next_index) for feed in batch]
        checks = {feed.session_id for feed in batch if feed.check_gone}
        for feed in batch:
            feed.check_gone = False  # a deletion hint that comes during the read sets it for the next one
        try:
            found, existing = await _read(starts, checks)
        except Exception as exc:  # the database away for a moment: read them again in a while
            log.warning("reading %d followed sessions failed (%s); again in 1 s", len(batch), exc)
            await asyncio.sleep(1.0)
            for feed in batch:
                feed.check_gone = feed.check_gone or feed.session_id in checks
                self.mark(feed)
            return
        for feed in batch:
            lines = found.get(feed.session_id)
            if lines and lines[0].index == feed.next_index:  # else the feed moved on meanwhile; never here
                feed.add(lines)
                if len(lines) == BUFFER:
                    self.mark(feed)  # more waiting: read on
            if feed.session_id in checks and feed.session_id not in existing:
                feed.end()


def _background(coro, name: str) -> asyncio.Task:
    """A task of the process, not of the request that happened to start it: in that request's
    context its database calls would go to the request's thread set, gone once it ends."""
    return asyncio.get_running_loop().create_task(coro, name=name, context=contextvars.Context())


@database_sync_to_async
def _read(starts: list[tuple[str, int]], checks: set[str]) -> tuple[dict[str, list[Line]], set[str]]:
    counts.feed_reads += 1
    found = feed_lines(starts, BUFFER)
    existing = set(Session.objects.filter(pk__in=checks).values_list("pk", flat=True)) if checks else set()
    return found, existing


@database_sync_to_async
def _tips(session_ids: list[str]) -> dict[str, int]:
    """Each session's next event index; a deleted session is left out."""
    counts.net_reads += 1
    return dict(Session.objects.filter(pk__in=session_ids).values_list("pk", "next_event_index"))


class Feeds:
    """The feeds of one event loop (a web process has one), by session."""

    def __init__(self) -> None:
        self.by_session: dict[str, Feed] = {}
        self.reader = Reader()
        self.net: asyncio.Task | None = None

    async def join(self, session_id: str) -> Feed:
        """The session's feed, watching its wake-ups by the time this returns."""
        feed = self.by_session.get(session_id)
        if feed is None:
            feed = self.by_session[session_id] = Feed(session_id, self)
            try:
                feed.watch = await wakeups.watch(session_id, feed.hint, feed.poll_after)
            except BaseException as exc:
                del self.by_session[session_id]
                feed.watching.set_exception(exc)
                feed.watching.exception()  # seen: the followers waiting for it get it from their own await
                raise
            feed.watching.set_result(None)
            if self.net is None or self.net.done():
                self.net = _background(self.safety_net(), "feed-safety-net")
        feed.followers += 1
        try:
            await asyncio.shield(feed.watching)
        except BaseException:
            await self.leave(feed)
            raise
        return feed

    async def leave(self, feed: Feed) -> None:
        feed.followers -= 1
        if feed.followers == 0:
            if self.by_session.get(feed.session_id) is feed:
                del self.by_session[feed.session_id]
            self.reader.marked.pop(feed, None)
            if feed.watch is not None:
                await feed.watch.close()

    async def safety_net(self) -> None:
        """Every AGENTSITE_STREAM_POLL_IDLE seconds, while this loop has feeds: the rows of
        all their sessions, in batches; read the feeds that are behind, end the deleted."""
        while self.by_session:
            await asyncio.sleep(settings.AGENTSITE_STREAM_POLL_IDLE)
            feeds = [feed for feed in self.by_session.values() if feed.next_index is not None]
            for n in range(0, len(feeds), TIPS_SESSIONS):
                chunk = feeds[n:n + TIPS_SESSIONS]
                try:
                    tips = await _tips([feed.session_id for feed in chunk])
                except Exception as exc:  # the database away for a moment: the next pass
                    log.warning("the followed sessions' safety net failed (%s)", exc)
                    break
                for feed in chunk:
                    tip = tips.get(feed.session_id)
                    if tip is None:
                        feed.end()
                    elif tip > feed.next_index:
                        self.reader.mark(feed)


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Feeds] = weakref.WeakKeyDictionary()


def feeds() -> Feeds:
    """This event loop's feeds."""
    loop = asyncio.get_running_loop()
    found = _by_loop.get(loop)
    if found is None:
        found = _by_loop[loop] = Feeds()
    return found

