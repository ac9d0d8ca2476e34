"""Wake-ups over the channel layer: "session X has events up to N".

They are hints only. The event table is the source of truth and readers
re-read it after every wake-up or poll, so a dropped or unroutable wake-up
(the in-memory layer cannot cross processes) costs latency, never events.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from asgiref.sync import SyncToAsync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from sessions import doorbell
from sessions.loopthread import LoopThread

log = logging.getLogger(__name__)


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
    if layer is not None:
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
        doorbell.ring("web", f"{session_id} {index}".encode())
        return
    future = asyncio.run_coroutine_threadsafe(apublish(session_id, index), _loop.get())
    future.add_done_callback(_done)
