"""An event loop on a thread of its own, one per process, for synchronous code that
needs asynchronous clients (channel-layer wake-ups, MCP connections).

`async_to_sync` would build a new loop per call, and clients that pool
connections per loop (channels_redis, the MCP SDK's sessions) need one
long-lived loop. A forked process starts its own: the parent's thread does
not exist in the child.
"""
from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from concurrent.futures import Future


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()

    def get(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None or self.pid != os.getpid():
                self.pid = os.getpid()
                self.loop = asyncio.new_event_loop()
                threading.Thread(target=self.loop.run_forever, name=self.name, daemon=True).start()
            return self.loop


async def _in_context(coro, context: contextvars.Context):
    return await asyncio.get_running_loop().create_task(coro, context=context)


def submit(loop: asyncio.AbstractEventLoop, coro) -> Future:
    """Run `coro` on `loop` in a copy of the caller's context (its log ids, its trace span)."""
    return asyncio.run_coroutine_threadsafe(_in_context(coro, contextvars.copy_context()), loop)
