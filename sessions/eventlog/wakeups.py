"""Wake-ups: "session X has events up to N".

On PostgreSQL they are notifications the writer's transaction sends
(`sessions.eventlog.pgnotify`); otherwise they go over the channel layer after the
commit (on the embedded default, other processes ring the web process's
doorbell). They are hints only. The event table is the source of truth:
readers (sessions.eventlog.feeds) re-read it after every wake-up, poll it where the
transport can drop a hint, and a process-wide safety net looks at it now
and then, so a dropped or unroutable wake-up costs latency, never events.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import os
from typing import Any, Callable

from asgiref.sync import SyncToAsync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection, transaction

from sessions.eventlog import doorbell, pgnotify
from sessions.plumbing.loopthread import LoopThread

log = logging.getLogger(__name__)


# How long a writer waits for room in a web process's doorbell queue before its wake-up is
# dropped (and left to the readers' polls): a burst of appends must not lose most of them.
RING_PATIENCE = 0.2


def group_name(session_id: str) -> str:
    return f"session.{session_id}"


async def listen_for_other_processes() -> None:
    """In a web process on the in-memory layer: relay other processes' doorbell rings to local readers."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        return  # a shared layer (Redis) already crosses processes

    def on_ring(data: bytes) -> None:
        session_id, _, index = data.decode(errors="replace").partition(" ")
        if session_id:
            number = int(index) if index.lstrip("-").isdigit() else -1
            asyncio.get_running_loop().create_task(apublish(session_id, number))

    await doorbell.listen("web", on_ring)


async def apublish(session_id: str, index: int) -> None:
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        # Its readers are all in this process: handed over directly. Through the layer, each
        # message would cost a pass over every channel of the process (its expiry sweep).
        dispatch(session_id, index)
    elif layer is not None:
        await layer.group_send(group_name(session_id), {"type": "session.events", "index": index})


# Publishing from sync code (a worker): channels_redis keeps its connection pool per loop.
_loop = LoopThread("wakeups")


def _done(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("wake-up not delivered: %s", future.exception())


def _main_loop() -> asyncio.AbstractEventLoop | None:
    """The server's event loop when called from a sync view under ASGI, else None."""
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    if loop is not None and getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) == os.getpid():
        return loop if loop.is_running() else None
    return None


def publish(session_id: str, index: int) -> None:
    """Fire-and-forget from any context; never blocks the caller on the layer."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        running.create_task(apublish(session_id, index))
        return
    # In-process readers (the in-memory layer) live on the server's loop:
    # their queues must be fed from that loop, not from another thread's.
    main = _main_loop()
    if main is not None:
        main.call_soon_threadsafe(lambda: main.create_task(apublish(session_id, index)))
        return
    if isinstance(get_channel_layer(), InMemoryChannelLayer):
        # Readers live in the web process's memory: ring its doorbell instead.
        doorbell.ring("web", f"{session_id} {index}".encode(), patience=RING_PATIENCE)
        return
    future = asyncio.run_coroutine_threadsafe(apublish(session_id, index), _loop.get())
    future.add_done_callback(_done)


def announce(session_id: str, index: int) -> None:
    """From inside the writer's transaction: readers are woken once it commits."""
    if connection.vendor == "postgresql":
        pgnotify.notify(session_id, index)
    else:
        transaction.on_commit(lambda: publish(session_id, index))


# --- the reader's side ------------------------------------------------------------------

# What a hint's index may say besides "events up to N": a follow-up was admitted
# (its turn has written nothing yet), the session was deleted.
ADMITTED = -1
DELETED = -2


async def watch(session_id: str, on_hint: Callable[[int | None], None],
                poll: Callable[[], float | None] = lambda: None) -> NotifyWatch | LocalWatch | LayerWatch:
    """Call `on_hint(index)` on each wake-up of the session, from now on (so a reader that
    watches before its first read misses nothing). `poll()`: seconds until `on_hint(None)`
    is called if no wake-up came, or None for no poll; asked again after every call.
    On PostgreSQL no wake-up is lost while the listener is connected (and every reader
    is woken when it reconnects): there is no poll."""
    if connection.vendor == "postgresql":
        return NotifyWatch(session_id, on_hint)
    if isinstance(get_channel_layer(), InMemoryChannelLayer):
        await listen_for_other_processes()
        return LocalWatch(session_id, on_hint, poll)
    return LayerWatch(session_id, on_hint, poll, await LayerSubscription.open(session_id))


class NotifyWatch:
    def __init__(self, session_id: str, on_hint: Callable[[int], None]):
        self.session_id, self.on_hint = session_id, on_hint
        pgnotify.hub.subscribe(session_id, on_hint)

    async def close(self) -> None:
        pgnotify.hub.unsubscribe(self.session_id, self.on_hint)


_local: dict[str, set[LocalWatch]] = {}


def dispatch(session_id: str, index: int) -> None:
    """Hand a wake-up to this process's watchers of the session (the in-memory layer's case)."""
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    for watcher in list(_local.get(session_id, ())):
        if watcher.loop is current:
            watcher.hint(index)
        elif not watcher.loop.is_closed():
            watcher.loop.call_soon_threadsafe(watcher.hint, index)


class LocalWatch:
    """The in-memory layer's: wake-ups of this process's writers and of other processes' doorbell
    rings arrive through `dispatch`; the poll is a timer on the loop, not a task."""

    def __init__(self, session_id: str, on_hint: Callable[[int | None], None], poll: Callable[[], float | None]):
        self.session_id, self.on_hint, self.poll = session_id, on_hint, poll
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.closed = False
        _local.setdefault(session_id, set()).add(self)
        self._arm()

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        timeout = None if self.closed else self.poll()
        self.timer = None if timeout is None else self.loop.call_later(timeout, self.hint, None)

    def hint(self, index: int | None) -> None:
        if not self.closed:
            self.on_hint(index)
            self._arm()

    async def close(self) -> None:
        self.closed = True
        self._arm()
        watchers = _local.get(self.session_id)
        if watchers is not None:
            watchers.discard(self)
            if not watchers:
                del _local[self.session_id]


class LayerWatch:
    """A channel-layer subscription and the task that relays what it receives (or its poll timeouts)."""

    def __init__(self, session_id: str, on_hint: Callable[[int | None], None], poll: Callable[[], float | None],
                 subscription: LayerSubscription):
        self.subscription = subscription
        # In a context of its own: not the request's that opened it, which ends before it.
        self.task = asyncio.get_running_loop().create_task(self.relay(on_hint, poll), name=f"watch-{session_id}",
                                                           context=contextvars.Context())

    async def relay(self, on_hint: Callable[[int | None], None], poll: Callable[[], float | None]) -> None:
        while True:
            timeout = poll()
            woke = await self.subscription.wait(timeout)
            if woke is None:  # the receive failed: wake-ups are hints, read the table at the poll pace
                await asyncio.sleep(timeout if timeout is not None else 1.0)
                on_hint(None)
            else:
                on_hint(self.subscription.index if woke else None)

    async def close(self) -> None:
        self.task.cancel()
        await self.subscription.close()


class LayerSubscription:
    def __init__(self, session_id: str, layer: Any, channel: str):
        self.session_id, self.layer, self.channel = session_id, layer, channel
        self.pending: asyncio.Future | None = None
        self.index = ADMITTED  # the index the last message received said

    @classmethod
    async def open(cls, session_id: str) -> LayerSubscription:
        await listen_for_other_processes()
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group_name(session_id), channel)
        return cls(session_id, layer, channel)

    async def wait(self, timeout: float | None) -> bool | None:
        """True when woken (`index` says up to where), False at the timeout, None if the receive failed."""
        # One receive stays pending across polls instead of being cancelled by
        # each poll timeout: channels_redis takes a cancelled receive for a
        # consumer that left, and a cancel landing in its Redis read can be
        # swallowed, stalling the reader until the read timeout raises.
        if self.pending is None:
            self.pending = asyncio.ensure_future(self.layer.receive(self.channel))
            self.pending.add_done_callback(_retrieve)
        done, _ = await asyncio.wait([self.pending], timeout=timeout)
        if not done:
            return False
        error = None if self.pending.cancelled() else self.pending.exception()
        message = None if error is not None or self.pending.cancelled() else self.pending.result()
        self.pending = None
        if error is not None:
            log.debug("wake-up receive failed on session %s: %r", self.session_id, error)
            return None
        index = message.get("index") if isinstance(message, dict) else None
        self.index = index if isinstance(index, int) else ADMITTED
        return True

    async def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
        await self.layer.group_discard(group_name(self.session_id), self.channel)


def _retrieve(task: asyncio.Future) -> None:
    """Mark a receive's failure as seen, so asyncio does not log it as unhandled."""
    if not task.cancelled():
        task.exception()
