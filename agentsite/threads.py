"""A fixed set of threads for Django's synchronous code under ASGI.

Django's ASGI handler gives every request a thread of its own: a new
thread per request, and with it a new database connection (a new SQLite
connection with its pragmas, or a pool checkout) and a pile of connections
held by threads that have finished but are not yet collected. Here each
request is handed one of a few long-lived threads instead; all the
request's synchronous work (middleware, views, database calls of a
streaming view) runs on that thread, as Django requires, and its
connection outlives the request.

A request goes to the thread with the least work queued at that moment, so
one slow call (a tool run by a direct call, a wait on SQLite's write lock)
holds up only the requests that land behind it, not the others.

The middleware chain is built synchronously, as under WSGI, and a request
crosses to its thread once for the whole chain. Built for ASGI, Django
would run each synchronous middleware's request and response halves in a
thread of their own: a dozen crossings, about 4 ms of CPU on a request
that does nothing. An async view (the event stream) is called from the
thread through `async_to_sync` and runs on the event loop.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler


class CountingExecutor(ThreadPoolExecutor):
    """One thread; counts the calls submitted to it that have not finished."""

    def __init__(self, name: str):
        super().__init__(max_workers=1, thread_name_prefix=name)
        self.pending = 0
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with self._lock:
            self.pending += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future) -> None:
        with self._lock:
            self.pending -= 1


class ThreadSet:
    def __init__(self, size: int):
        self.executors = [CountingExecutor(f"web-{i}") for i in range(max(1, size))]
        self._next = 0

    def pick(self) -> CountingExecutor:
        # Least pending first; among equals, rotate so idle threads share the load.
        n = len(self.executors)
        start, self._next = self._next, (self._next + 1) % n
        return min((self.executors[(start + i) % n] for i in range(n)), key=lambda e: e.pending)


class PooledThreadsASGIHandler(ASGIHandler):
    def __init__(self, threads: int):
        super().__init__()
        self.threads = ThreadSet(threads)

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)  # one crossing per request: see the module's docstring
        if is_async:
            self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        # Django's own ThreadSensitiveContext inside finds this one set and adds none.
        async with ThreadSensitiveContext(executor=self.threads.pick()):
            await super().__call__(scope, receive, send)
