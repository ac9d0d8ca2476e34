"""A process's ticker: one thread that runs the periodic jobs every AGENTSITE_SWEEP_SECONDS.

The jobs are registered at start-up (sessions.apps: the recovery sweep, due
timers, then retention), so this module needs none of them. One ticker runs in each
qcluster worker process (django-q2's post_spawn), and in any process holding
a run-form reminder's handler (sessions.timers.reminders); each keeps its host's lease
(sessions.plumbing.processes).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import close_old_connections
from django_q.conf import Conf

from sessions.models.host import Host
from sessions.plumbing.processes import ensure_host_lease, host_id
from sessions.workspaces.volume import VolumeNotShared, check, leave_mark

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


def start_ticker(sender=None, **kwargs) -> None:
    """django-q2's post_spawn: every worker process ticks, so a dead one is covered by the others.

    The worker leaves its host's mark on the workspaces volume before it takes the lease: a live
    host without its mark there makes the other hosts refuse local turns (sessions.workspaces.volume).
    """
    if Conf.SYNC:
        return  # tests running tasks in their own process: no worker was spawned
    try:
        leave_mark(Path(settings.AGENTSITE_WORKSPACES_ROOT), host_id())
    except OSError as exc:
        log.error("cannot leave this host's mark in AGENTSITE_WORKSPACES_ROOT: %s", exc)
    ensure_ticker(Host.Kind.WORKER)
    try:
        check()
    except VolumeNotShared as exc:
        log.error("%s Local-runtime turns on this host are refused until it is.", exc)
    except Exception:
        log.exception("could not check that AGENTSITE_WORKSPACES_ROOT is shared")
