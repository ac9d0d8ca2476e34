"""A process's ticker: one thread that runs the periodic jobs every AGENTSITE_SWEEP_SECONDS.

The jobs are registered at start-up (sessions.apps: the recovery sweep, due
timers, then retention), so this module needs none of them. One ticker runs in each
qcluster worker process (django-q2's post_spawn: sessions.workspaces.volume.worker_spawned
starts it, once the worker left its host's mark on the workspaces volume), and in any process holding
a run-form reminder's handler (sessions.timers.reminders); each keeps its host's lease
(sessions.plumbing.processes).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

from django.conf import settings
from django.db import close_old_connections
from django_q.conf import Conf

from sessions.plumbing.processes import ensure_host_lease

log = logging.getLogger(__name__)

_jobs: list[tuple[str, Callable[[], object]]] = []
_lock = threading.Lock()
_ticker_pid = 0


def add_job(name: str, job: Callable[[], object]) -> None:
    """Run `job` on every tick, after the jobs added before it (once per name)."""
    if all(existing != name for existing, _ in _jobs):
        _jobs.append((name, job))


class Ticker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="ticker", daemon=True)

    def run(self) -> None:
        while True:
            close_old_connections()
            for name, job in list(_jobs):
                try:
                    job()
                except Exception:
                    log.exception("%s failed", name)
            time.sleep(settings.AGENTSITE_SWEEP_SECONDS)


def ensure_ticker(kind: str | None = None) -> None:
    """Start this process's ticker thread once, and take its host's lease (`kind`: the process's role)."""
    global _ticker_pid
    # In sync mode (tests) "spawning" a worker runs tasks in the caller's process: tests tick by hand.
    if Conf.SYNC:
        return
    ensure_host_lease(kind)
    with _lock:
        if _ticker_pid == os.getpid():
            return
        _ticker_pid = os.getpid()
        Ticker().start()
