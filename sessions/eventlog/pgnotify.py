"""Wake-ups through PostgreSQL's LISTEN/NOTIFY, when the database is PostgreSQL.

The writer calls `pg_notify` inside the transaction that appends the
events, so PostgreSQL itself tells every listening process the moment it
commits: no after-commit step in the writer, no round trips through the
channel layer, and nothing announced for a transaction that rolled back.
Each web process keeps one connection listening (outside the pool) and
wakes its local readers through a `Hub`.

Still hints: a reader re-reads the table after each wake-up, every reader
is woken when the listener has reconnected, and a process-wide safety net
(sessions.eventlog.feeds) looks at the table now and then, so a notification lost
while the listener reconnects costs latency, never events.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Callable

from django.db import connection

log = logging.getLogger(__name__)

CHANNEL = "agentsite_events"
RECONNECT_SECONDS = 1.0


def notify(session_id: str, index: int) -> None:
    """In the writer's transaction: delivered to listeners when it commits."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, f"{session_id} {index}"])


class Hub:
    """The readers of one process, by session: a notification calls each one's `on_hint(index)`."""

    def __init__(self) -> None:
        self.readers: defaultdict[str, set[Callable[[int], None]]] = defaultdict(set)
        self.listener: asyncio.Task | None = None

    def subscribe(self, session_id: str, on_hint: Callable[[int], None]) -> None:
        self.ensure_listener()
        self.readers[session_id].add(on_hint)

    def unsubscribe(self, session_id: str, on_hint: Callable[[int], None]) -> None:
        readers = self.readers.get(session_id)
        if readers is not None:
            readers.discard(on_hint)
            if not readers:
                del self.readers[session_id]

    def wake(self, session_id: str, index: int = -1) -> None:
        for on_hint in list(self.readers.get(session_id, ())):
            on_hint(index)

    def ensure_listener(self) -> None:
        loop = asyncio.get_running_loop()
        if self.listener is None or self.listener.done() or self.listener.get_loop() is not loop:
            self.listener = loop.create_task(self.listen(), name="pg-listen")

    async def listen(self) -> None:
        import psycopg  # the PostgreSQL driver, here only: a process on SQLite never loads it

        # Django's own cursor class and adapters are for its synchronous connections.
        params = {k: v for k, v in connection.get_connection_params().items()
                  if k not in ("cursor_factory", "context", "prepare_threshold")}
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(**params, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    # Notifications sent while nothing listened are lost: every reader
                    # reads the table again now, instead of at the next safety-net pass.
                    for session_id in list(self.readers):
                        self.wake(session_id)
                    async for note in conn.notifies():
                        session_id, _, index = note.payload.partition(" ")
                        self.wake(session_id, int(index) if index.lstrip("-").isdigit() else -1)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a restart, a killed backend: the safety net covers meanwhile
                log.warning("LISTEN connection lost (%s); reconnecting in %.0f s", exc, RECONNECT_SECONDS)
            await asyncio.sleep(RECONNECT_SECONDS)


hub = Hub()
