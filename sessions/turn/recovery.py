"""Recovery of turns whose worker died.

A running turn holds a lease its worker renews (see leases.Heartbeat), and
its worker's host holds a lease its processes renew (sessions.plumbing.processes). The
sweep ends a turn whose lease lapsed, whose worker process on this host is
gone, or whose worker's host is lost (its lease lapsed: the host died), with
`turn.failed` (`worker_lost`); calls that had started are
reported as interrupted and never run again. The conditional update on the
turn makes the sweep safe to run from every qcluster at once. It also
re-enqueues a session's active turn that sat queued too long, in case its
task was lost (claiming is conditional, so a duplicate task is harmless),
starts turns waiting for the running-turn cap whose principal is below it,
then runs the steps features registered (sessions.turn.extensions: the
custom-channel event deliveries whose worker died are enqueued again). A
lost turn's trigger may add events to its end (a handoff's record fails).
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sessions.eventlog.events import SessionGone
from sessions.turn import extensions
from sessions.turn.lifecycle import (ending_events, principal_turn_lock, refill_slots, requeue_lost_task, running_turn_cap,
                                settle)
from sessions.models import EventType, Host, Session, ToolCall, Turn
from sessions.plumbing.processes import host_id, process_gone
from sessions.sql import recovery as sql_recovery
from sessions.turn.timings import lost_turn_timings
from sessions.turn.tools import result_payload

log = logging.getLogger(__name__)

LOST_ERROR = "worker lost: the process running this turn stopped"


def fail_lost_turn(turn: Turn) -> bool:
    """End one lost turn; False if it was not lost after all (or someone else ended it).

    `turn` must carry the `claimed_by` the sweep saw: the end is conditional on
    it, so a turn claimed again meanwhile is left alone.
    """
    session = Session.objects.filter(pk=turn.session_id).first()
    if session is None:
        return False
    hooks = session.hooks()  # loaded before the write lock is taken
    with transaction.atomic():
        # The principal's lock before the call rows: lifecycle's order (settle takes it again, reentrant).
        principal_turn_lock(session)
        pending = []
        for row in ToolCall.objects.filter(turn=turn).exclude(status__in=ToolCall.SETTLED):
            started = row.status == ToolCall.Status.RUNNING
            if row.abandon("interrupted: the worker running this call was lost; it was not run again" if started
                           else "not run: the worker running this turn was lost"):
                pending.append((EventType.ACTION_RESULT, result_payload(row, 0.0)))
        handler = extensions.triggers.get(turn.trigger)
        if handler is not None and handler.lost is not None:  # e.g. a handoff's record ends failed
            pending += handler.lost(turn)
        # Its usage is unknown: the steps it ran were never reported; so are most of its timings.
        timings = lost_turn_timings(turn.created_at, turn.started_at, timezone.now())
        events, session_status = ending_events(session, Turn.Status.FAILED, LOST_ERROR, "worker_lost", None, None,
                                               timings)
        # The conversation keeps the input, so a follow-up turn knows what was asked.
        # A direct tool call's turn has no model input to keep.
        kept = turn.message and turn.trigger != Turn.Trigger.TOOL
        messages = list(session.conversation) + [{"role": "user", "content": turn.message}] if kept else None
        if not settle(session, turn, pending + events, status=Turn.Status.FAILED, error=LOST_ERROR,
                      messages=messages, usage=None, session_status=session_status, hooks=hooks, timings=timings):
            transaction.set_rollback(True)  # not ours: the calls it abandoned stay as they were
            return False
    return True


def sweep(now=None) -> int:
    """One pass: end lost turns, re-enqueue stale queued ones. Returns how many turns it ended.

    A turn of a lost host ends at once, without waiting for its own lease; this
    host is never taken for lost by its own sweep (its processes are checked by pid).
    One statement first asks which parts have work (sql.recovery.due): most passes
    find none, and each part's own queries run only when it has.
    """
    now = now or timezone.now()
    here = host_id()
    stale = now - timezone.timedelta(seconds=settings.AGENTSITE_REQUEUE_SECONDS)
    due = sql_recovery.due(now, here, stale)
    ended = 0
    if due.running or due.host_lost:
        ended = end_lost_turns(now, here, Host.objects.lost(now) - {here} if due.host_lost else set())
    if due.queued:
        retry_at = now + timezone.timedelta(seconds=settings.AGENTSITE_REQUEUE_SECONDS)
        # Only turns already due another task: the rest would each cost a transaction a pass for nothing.
        active_queued = Session.objects.filter(Turn.due_reenqueue(now, stale, "active_turn__"),
                                               active_turn__status=Turn.Status.QUEUED).values_list("active_turn_id",
                                                                                                   flat=True)
        for turn_id in active_queued:
            requeue_lost_task(turn_id, now, stale, retry_at)
    if due.waiting and running_turn_cap():
        # Turns waiting for a running slot while their principal is below the cap (the cap raised
        # at a restart, a session deleted by a process that died before handing its slot on).
        for principal_id, authenticator in Turn.objects.waiting_owners():
            refill_slots(principal_id, authenticator)
    for step in extensions.recovery_steps:
        if step.when is None or getattr(due, step.when):
            step.run(now)
    return ended


def end_lost_turns(now, here: str, lost_hosts: set[str]) -> int:
    """End the running turns whose lease lapsed, whose process on this host is gone, or whose host is lost."""
    ended = 0
    held_by = Q(claimed_by__startswith=f"{here}:")
    for host in lost_hosts:
        held_by |= Q(claimed_by__startswith=f"{host}:")
    running = Turn.objects.filter(status=Turn.Status.RUNNING).filter(Q(lease_until__lt=now) | held_by).only(
        "id", "session_id", "trigger", "claimed_by", "lease_until", "message", "created_at", "started_at")
    for turn in running:
        lapsed = turn.lease_until is not None and turn.lease_until < now
        host = turn.claimed_by.rpartition(":")[0]
        if lapsed or host in lost_hosts or (host == here and process_gone(turn.claimed_by)):
            try:
                ended += fail_lost_turn(turn)
            except SessionGone:
                pass
    return ended


def sweep_and_report() -> None:
    """The ticker's recovery job (sessions.timers.ticker)."""
    if ended := sweep():
        log.warning("recovered %d turn(s) of lost workers", ended)
