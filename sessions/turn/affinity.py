"""A session's next turn, run by the worker process that ran its last one.

Some sessions leave something alive in the process that ran their turn: a
session on another agent runtime (`claude-agent:`) leaves its child there,
which answers a follow-up in a fraction of what a new child takes to start
and resume. The task queue hands a turn to whichever worker dequeues it, so
with several workers a follow-up would mostly miss that child. A worker that
claims such a turn while the session's last turn ran, recently and to its
end, in another live process of this machine hands the turn over: it puts
the turn back to queued, rings that process's `keeper` doorbell with the
turn's id, and waits a moment for that process to claim it. If nobody does
(the process is busy dying, the ring was lost), it claims the turn back and
runs it itself, as it would have without a keeper: nothing is lost but the
wait. Each process that runs such turns listens on its own bell and runs
each turn handed to it on a thread of its own.

Across machines (a worker on another host) there is no doorbell to ring:
the turn runs where it was dequeued.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from datetime import timedelta
from typing import Callable

from django.db import connection
from django.utils import timezone

from sessions.eventlog import doorbell
from sessions.models import Turn
from sessions.plumbing.processes import host_id, process_id
from sessions.turn.leases import lease_seconds

log = logging.getLogger(__name__)

BELL = "keeper"
WAIT_SECONDS = 2.0  # for the keeper to claim a turn handed to it, before this worker runs it itself

_listening: int | None = None
_listen_lock = threading.Lock()


def listen(run: Callable[[str], None]) -> None:
    """Run each turn handed to this process with `run(turn id)` from now on (once per process)."""
    global _listening
    with _listen_lock:
        if _listening == os.getpid():
            return
        _listening = os.getpid()
    bell = doorbell.Bell(BELL)
    threading.Thread(target=_listen, args=(bell, run), name="turn-keeper", daemon=True).start()


def _listen(bell: doorbell.Bell, run: Callable[[str], None]) -> None:
    while True:
        try:
            said = bell.receive(60.0)
        except OSError:  # the next round listens again: a hand-over meanwhile runs where it was dequeued
            log.exception("the keeper doorbell failed")
            time.sleep(1.0)
            continue
        for turn_id in (one.decode(errors="replace") for one in said):
            # Not a daemon: a worker that ends (django-q2 recycles it) finishes the turns handed to it first.
            threading.Thread(target=_run_one, args=(run, turn_id), name=f"turn-{turn_id}").start()


def _run_one(run: Callable[[str], None], turn_id: str) -> None:
    try:
        run(turn_id)
    except Exception:  # the turn's own failures are settled inside `run`; this is anything else
        log.exception("turn %s handed to this worker failed", turn_id)
    finally:
        connection.close()  # the thread ends: its connection goes with it


def keeper_of(turn: Turn, within: float) -> int | None:
    """The pid of the other live process of this machine whose run of the session's last turn ended,
    completed, less than `within` seconds ago; None when this process should run the turn."""
    last = (Turn.objects.filter(session_id=turn.session_id, created_at__lt=turn.created_at)
            .order_by("-created_at").values_list("status", "claimed_by", "ended_at").first())
    if last is None:
        return None
    status, claimed_by, ended_at = last
    if status != Turn.Status.COMPLETED or ended_at is None or ended_at < timezone.now() - timedelta(seconds=within):
        return None
    host, _, pid = claimed_by.rpartition(":")
    if host != host_id() or not pid.isdigit() or int(pid) == os.getpid():
        return None
    return int(pid)


def hand_over(turn: Turn, pid: int) -> bool:
    """Give the turn (claimed by this process) to process `pid`; True when another process took it,
    False when this one holds it again and is to run it."""
    me = process_id()
    if not Turn.unclaim(turn.id, me):
        return True  # no longer ours to give (an interrupt ended it, recovery took it)
    if doorbell.ring_one(BELL, pid, turn.id.encode()):
        deadline, pause = time.monotonic() + WAIT_SECONDS, 0.002
        while time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
            if not Turn.objects.filter(pk=turn.id, status=Turn.Status.QUEUED).exists():
                return True
    if Turn.claim(turn.id, me, lease_seconds()):
        log.info("turn %s: worker %s did not take it up; running it here", turn.id, pid)
        return False
    return True
