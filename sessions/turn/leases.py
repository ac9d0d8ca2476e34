"""A running turn's lease: its worker renews it, so recovery (sessions.turn.recovery) can tell a
turn whose worker died from one that is merely long."""
from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection

from sessions.models import Turn

log = logging.getLogger(__name__)


def lease_seconds() -> float:
    return float(settings.AGENTSITE_TURN_LEASE_SECONDS)


def drop_broken_connection() -> None:
    """After a database error: give back this thread's connection if it no longer works.

    The next query then opens (or takes from the pool) a fresh one instead of
    failing on the dead one again.
    """
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


class Heartbeat:
    """Keeps a turn's lease while it runs, so a long model call or tool keeps it.

    One thread per process renews the leases of every turn the process runs;
    a turn only registers and unregisters (a thread per turn cost more than a
    scripted turn takes).
    """

    _lock = threading.Lock()
    _turns: dict[str, Turn] = {}
    _pid: int | None = None

    def __init__(self, turn: Turn):
        self.turn = turn

    def __enter__(self) -> "Heartbeat":
        cls = type(self)
        with cls._lock:
            cls._turns[self.turn.id] = self.turn
            if cls._pid != os.getpid():  # a forked worker needs its own thread
                cls._pid = os.getpid()
                threading.Thread(target=cls._beat, name="heartbeat", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        with type(self)._lock:
            type(self)._turns.pop(self.turn.id, None)

    @classmethod
    def _beat(cls) -> None:
        while True:
            time.sleep(max(0.5, lease_seconds() / 3))
            with cls._lock:
                turns = list(cls._turns.values())
            for turn in turns:
                try:
                    turn.renew_lease(lease_seconds())
                except Exception:  # a missed beat only shortens the lease
                    log.exception("heartbeat of %s failed", turn.id)
                    drop_broken_connection()
            if not turns:
                connection.close()
