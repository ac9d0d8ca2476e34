"""Recovery of turns whose worker died.

A running turn holds a lease its worker renews (see engine.Heartbeat). The
sweep ends a turn whose lease lapsed, or whose worker process on this host
is gone, with `turn.failed` (`worker_lost`); calls that had started are
reported as interrupted and never run again. The conditional update on the
turn makes the sweep safe to run from every qcluster at once. It also
re-enqueues a session's active turn that sat queued too long, in case its
task was lost (claiming is conditional, so a duplicate task is harmless).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone

from sessions import tools as calls_
from sessions.admission import enqueue_turn
from sessions.events import SessionGone
from sessions.models import Session, ToolCall, Turn

log = logging.getLogger(__name__)

LOST_ERROR = "worker lost: the process running this turn stopped"
REQUEUE_AFTER_SECONDS = 30


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _worker_dead(claimed_by: str) -> bool:
    """True only when the claiming process was on this host and is gone."""
    host, _, pid = claimed_by.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid))


def fail_lost_turn(turn: Turn) -> bool:
    """End one lost turn; False if it was not lost after all (or someone else ended it)."""
    from sessions.engine import settle

    session = Session.objects.filter(pk=turn.session_id).first()
    if session is None:
        return False
    hooks = session.hooks()  # loaded before the write lock is taken
    with transaction.atomic():
        won = Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING, claimed_by=turn.claimed_by).update(
            status=Turn.Status.FAILED, error=LOST_ERROR, ended_at=timezone.now(), lease_until=None,
        )
        if not won:
            return False
        pending = []
        for row in ToolCall.objects.filter(turn=turn).exclude(status__in=[ToolCall.Status.DONE, ToolCall.Status.FAILED, ToolCall.Status.DENIED]):
            started = row.status == ToolCall.Status.RUNNING
            row.status = ToolCall.Status.INTERRUPTED
            row.error = ("interrupted: the worker running this call was lost; it was not run again" if started
                         else "not run: the worker running this turn was lost")
            row.save(update_fields=["status", "error"])
            pending.append(("action.result", calls_.result_payload(row, 0.0)))
        task = session.mode == Session.Mode.TASK
        pending.append(("turn.failed", {"error": LOST_ERROR, "code": "worker_lost", "usage": turn.usage or {}}))
        pending.append(("session.failed", {"error": LOST_ERROR}) if task else ("session.waiting", {}))
        # The conversation keeps the input, so a follow-up turn knows what was asked.
        # A direct tool call's turn has no model input to keep.
        kept = turn.message and turn.trigger != Turn.Trigger.TOOL
        messages = list(session.conversation) + [{"role": "user", "content": turn.message}] if kept else None
        settle(session, turn, pending, messages=messages, usage=None, status=Turn.Status.FAILED, error=LOST_ERROR,
               session_status=Session.Status.FAILED if task else Session.Status.WAITING, hooks=hooks)
    return True


def sweep(now=None) -> int:
    """One pass: end lost turns, re-enqueue stale queued ones. Returns how many turns it ended."""
    now = now or timezone.now()
    host_prefix = f"{socket.gethostname()}:"
    ended = 0
    running = Turn.objects.filter(status=Turn.Status.RUNNING).filter(
        Q(lease_until__lt=now) | Q(claimed_by__startswith=host_prefix)
    ).only("id", "session_id", "trigger", "claimed_by", "lease_until", "message", "usage")
    for turn in running:
        lapsed = turn.lease_until is not None and turn.lease_until < now
        if lapsed or _worker_dead(turn.claimed_by):
            try:
                ended += fail_lost_turn(turn)
            except SessionGone:
                pass
    stale = now - timezone.timedelta(seconds=REQUEUE_AFTER_SECONDS)
    retry_at = now + timezone.timedelta(seconds=REQUEUE_AFTER_SECONDS)
    active_queued = Session.objects.filter(active_turn__status=Turn.Status.QUEUED).values_list("active_turn_id", flat=True)
    for turn_id in active_queued:
        # lease_until of a queued turn marks when it was last re-enqueued, so each sweep does not add another task.
        if Turn.objects.filter(pk=turn_id, status=Turn.Status.QUEUED).filter(
            Q(lease_until__isnull=True, created_at__lt=stale) | Q(lease_until__lt=now)
        ).update(lease_until=retry_at):
            enqueue_turn(turn_id)
    return ended


class Sweeper(threading.Thread):
    """A process's ticker: the recovery sweep, then due timers, every AGENTSITE_SWEEP_SECONDS.

    One runs in each qcluster worker process, and in any process holding a
    run-form reminder's handler (see sessions.timers.ensure_ticker).
    """

    def __init__(self) -> None:
        super().__init__(name="ticker", daemon=True)

    def run(self) -> None:
        while True:
            try:
                close_old_connections()
                if ended := sweep():
                    log.warning("recovered %d turn(s) of lost workers", ended)
            except Exception:
                log.exception("recovery sweep failed")
            try:
                from sessions.timers import tick

                tick()
            except Exception:
                log.exception("timer tick failed")
            time.sleep(settings.AGENTSITE_SWEEP_SECONDS)


def start_sweeper(sender=None, **kwargs) -> None:
    """django-q2's post_spawn: every worker process ticks, so a dead one is covered by the others."""
    from sessions.timers import ensure_ticker

    ensure_ticker()
