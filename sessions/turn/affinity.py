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
(the process is busy or ending, the ring was lost), it claims the turn back
and runs it itself, as it would have without a keeper: nothing is lost but
the wait.

Each worker process that runs such turns listens on its own bell and runs
each turn handed to it on a thread of its own, at most HANDED_AT_ONCE at a
time, each stopped (interrupted) once it has run AGENTSITE_TURN_TIMEOUT
seconds, the bound the task queue puts on the turns it runs. A process
whose main thread has ended (the task queue recycling it) claims no more.
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

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from sessions.eventlog import doorbell
from sessions.models import Turn
from sessions.plumbing.processes import host_id, process_id
from sessions.turn.leases import drop_broken_connection, lease_seconds

log = logging.getLogger(__name__)

BELL = "keeper"
WAIT_SECONDS = 5.0  # for the keeper to claim a turn handed to it, before this worker runs it itself
HANDED_AT_ONCE = 4  # turns a process runs for others at a time; past that it leaves them to their sender

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
    slots = threading.BoundedSemaphore(HANDED_AT_ONCE)
    while True:
        try:
            said = bell.receive(60.0)
        except OSError:  # the next round listens again: a hand-over meanwhile runs where it was dequeued
            log.exception("the keeper doorbell failed")
            time.sleep(1.0)
            continue
        for turn_id in (one.decode(errors="replace") for one in said):
            if not threading.main_thread().is_alive():
                return  # the worker is ending: its senders run their turns themselves
            if not slots.acquire(blocking=False):
                continue  # busy: the sender claims the turn back
            # Not a daemon: a worker that ends finishes the turns handed to it first.
            threading.Thread(target=_run_one, args=(run, turn_id, slots), name=f"turn-{turn_id}").start()


def _run_one(run: Callable[[str], None], turn_id: str, slots: threading.BoundedSemaphore) -> None:
    # Outside the task queue, which stops a turn that runs too long by ending its worker: stopped here.
    limit = threading.Timer(float(settings.Q_CLUSTER["timeout"]), _stop_overdue, args=(turn_id,))
    limit.daemon = True
    limit.start()
    try:
        run(turn_id)
    except Exception:  # the turn's own failures are settled inside `run`; this is anything else
        log.exception("turn %s handed to this worker failed", turn_id)
    finally:
        limit.cancel()
        slots.release()
        connection.close()  # the thread ends: its connection goes with it


def _stop_overdue(turn_id: str) -> None:
    try:
        turn = Turn.objects.filter(pk=turn_id).first()
        if turn is not None and turn.request_interrupt():
            log.warning("turn %s ran past AGENTSITE_TURN_TIMEOUT: stopping it", turn_id)
    finally:
        connection.close()


def keeper_of(turn: Turn, within: float) -> int | None:
    """The pid of the other live process of this machine whose run of the session's last turn ended,
    completed, less than `within` seconds ago; None when this process should run the turn."""
    if within <= 0:
        return None
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
    """Give the turn (claimed by this process) to process `pid`; True when this process is done with it
    (another took it, or it is no longer ours), False when this one holds it again and is to run it."""
    me = process_id()
    # Queued as if just enqueued: the recovery sweep gives it another task only if it then sits there.
    retry_at = timezone.now() + timedelta(seconds=settings.AGENTSITE_REQUEUE_SECONDS)
    try:
        if not Turn.unclaim(turn.id, me, retry_at):
            return True  # no longer ours to give (recovery ended it)
    except DatabaseError:  # not given: still ours
        drop_broken_connection()
        return False
    if doorbell.ring_one(BELL, pid, turn.id.encode()):
        deadline, pause = time.monotonic() + WAIT_SECONDS, 0.002
        while time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
            try:
                if not Turn.objects.filter(pk=turn.id, status=Turn.Status.QUEUED).exists():
                    return True
            except DatabaseError:
                drop_broken_connection()
    for _ in range(2):  # a connection that broke while waiting: once more on a fresh one
        try:
            if not Turn.claim(turn.id, me, lease_seconds()):
                return True
            log.info("turn %s: worker %s did not take it up; running it here", turn.id, pid)
            return False
        except DatabaseError:
            drop_broken_connection()
    return True  # left queued: the recovery sweep enqueues it again at retry_at
