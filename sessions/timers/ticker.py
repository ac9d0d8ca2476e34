"""A process's ticker: one thread that runs the periodic jobs every AGENTSITE_SWEEP_SECONDS.

The jobs are registered at start-up (sessions.apps: the recovery sweep, due
timers, then retention), so this module needs none of them. A ticker runs in each
qcluster worker process (django-q2's post_spawn: sessions.workspaces.volume.worker_spawned
starts it, once the worker left its host's mark on the workspaces volume), and in any process holding
a run-form reminder's handler (sessions.timers.reminders); each keeps its host's lease
(sessions.plumbing.processes).

The workers of one state root take turns: only the one holding the ticker's
lock (`<state root>/ticker.lock`, an advisory lock the system drops when its
process ends) runs the jobs, since every job works on the shared database
and one pass a second is all they need; the others try for the lock each
interval, so a worker that ends or is replaced hands the duty on within a
second. A process holding a run-form reminder's handler always runs them:
only it can fire that reminder.
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import close_old_connections
from django_q.conf import Conf

from sessions.plumbing.processes import ensure_host_lease

log = logging.getLogger(__name__)

_jobs: list[tuple[str, Callable[[], object]]] = []
_lock = threading.Lock()
_ticker_pid = 0
_holds_handlers = False  # this process holds a run-form reminder's handler: it ticks whoever holds the lock


def add_job(name: str, job: Callable[[], object]) -> None:
    """Run `job` on every tick, after the jobs added before it (once per name)."""
    if all(existing != name for existing, _ in _jobs):
        _jobs.append((name, job))


class Ticker(threading.Thread):
    def __init__(self, shared: bool) -> None:
        """`shared`: the duty is taken in turns with the other workers of this state root."""
        super().__init__(name="ticker", daemon=True)
        self.shared = shared
        self.lock_fd: int | None = None

    def run(self) -> None:
        while True:
            if _holds_handlers or self.on_duty():
                close_old_connections()
                for name, job in list(_jobs):
                    try:
                        job()
                    except Exception:
                        log.exception("%s failed", name)
            time.sleep(settings.AGENTSITE_SWEEP_SECONDS)

    def on_duty(self) -> bool:
        """Whether this process runs the jobs now: it holds the state root's ticker lock, or just took it."""
        if not self.shared or self.lock_fd is not None:
            return True
        try:
            fd = os.open(Path(settings.STATE_ROOT) / "ticker.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:  # no lock to be had: every worker ticks, as correct and only costlier
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another worker holds it
            os.close(fd)
            return False
        self.lock_fd = fd  # held for this process's life
        return True


def ensure_ticker(kind: str | None = None) -> None:
    """Start this process's ticker thread once, and take its host's lease (`kind`: the process's role;
    a worker's ticker takes the duty in turns, any other process's, holding a reminder's handler, always ticks)."""
    global _ticker_pid, _holds_handlers
    # In sync mode (tests) "spawning" a worker runs tasks in the caller's process: tests tick by hand.
    if Conf.SYNC:
        return
    ensure_host_lease(kind)
    with _lock:
        if kind is None:
            _holds_handlers = True
        if _ticker_pid == os.getpid():
            return
        _ticker_pid = os.getpid()
        Ticker(shared=kind is not None).start()
