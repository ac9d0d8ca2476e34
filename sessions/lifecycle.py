"""The turn lifecycle: the one place that moves a session's execution lock
(`Session.active_turn`) and hands turns to django-q2.

Every move is a model transition (a conditional update that says whether it
won) composed here inside one transaction, and a turn is enqueued only from
`transaction.on_commit`, so a worker never looks for a row that has not
committed. The states and who triggers each move are drawn in ARCHITECTURE.md.

Lock order: every transaction here that writes several rows takes the
principal's turn lock first (only under a running-turn cap, `principal_turn_lock`),
then tool calls, then the session row (an event append or a Session update),
then the turn. A follow-up holds the session row while it interrupts the
turn; taking them the other way round deadlocks on PostgreSQL. So a move
whose winner a turn update decides makes its session writes first and rolls
them back if it lost.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.hooks import Hook
from sessions.events import append_events
from sessions.models import EventType, Session, ToolCall, Turn
from sessions.pglocks import lock_for_transaction
from sessions.sql.rows import insert_row
from sessions.taskqueue import enqueue
from sessions.usage import Usage, add_usage

# The django-q task that runs a turn (a dotted path: queued tasks outlive a deploy).
RUN_TURN_TASK = "sessions.engine.run_turn"


def enqueue_turn(turn_id: str) -> None:
    """Hand a turn to a worker. Only ever called from `on_commit` (or for a turn long committed)."""
    enqueue(RUN_TURN_TASK, turn_id, task_name=turn_id, ack_failure=True)


def _enqueue_on_commit(turn_id: str) -> None:
    transaction.on_commit(lambda: enqueue_turn(turn_id))


# --- the running-turn cap ----------------------------------------------------------------
#
# Under AGENTSITE_MAX_RUNNING_TURNS = N, at most N sessions of one principal hold an
# active turn (queued for a worker, running, or parked for approval: each holds its
# session's lock). A turn beyond that stays queued without the lock, and the end of one
# of the principal's turns activates the principal's oldest waiting turn, whatever its session.


def running_turn_cap() -> int:
    return settings.AGENTSITE_MAX_RUNNING_TURNS


def principal_turn_lock(session: Session) -> None:
    """Serialize, per principal, the transactions that count its active turns and take one more.

    On SQLite every write transaction already holds the database's lock
    (`transaction_mode: IMMEDIATE`); on PostgreSQL a transaction-scoped
    advisory lock does it. Taken first in its transaction (see the lock order above).
    """
    if running_turn_cap():
        lock_for_transaction(f"turns\0{session.authenticator}\0{session.principal_id}")


def _under_cap(session: Session) -> bool:
    cap = running_turn_cap()
    return not cap or Session.objects.holding_turns(session.principal_id, session.authenticator) < cap


def dispatch_waiting(session: Session) -> list[str]:
    """Activate the oldest turns waiting for the cap among `session`'s principal's sessions, while below it."""
    started: list[str] = []
    while _under_cap(session):
        waiting = Turn.objects.next_waiting(session.principal_id, session.authenticator)
        if waiting is None:
            break
        turn_id, session_id = waiting
        if not Session.take_lock(session_id, turn_id, Session.Status.RUNNING):
            break
        _enqueue_on_commit(turn_id)
        started.append(turn_id)
    return started


# --- queue → activate ---------------------------------------------------------------


def open_session(session: Session, turn: Turn, events: Sequence[tuple[str, dict[str, Any]]],
                 hooks: Sequence[Hook] = ()) -> None:
    """Insert a new session with its first turn already active and its opening events; enqueue the turn.

    One transaction: the FK from session to turn is checked at commit, so the
    two inserts may go in either order. The enqueue is registered after the
    events' hooks, so hooks see the opening events before any of the turn's.
    A principal at the running-turn cap gets the session with its turn
    waiting, queued without the lock (the session stays `idle`).
    """
    with transaction.atomic(savepoint=False):
        principal_turn_lock(session)
        free = _under_cap(session)
        if free:
            session.status = Session.Status.RUNNING
            session.active_turn_id = turn.id
        insert_row(session)
        turn.session = session
        insert_row(turn)
        append_events(session.id, events, hooks=hooks)
        if free:
            _enqueue_on_commit(turn.id)


def queue_turn(session: Session, **fields: Any) -> Turn:
    """A new queued turn; it starts at once if the session is free (else when the active turn settles)."""
    with transaction.atomic(savepoint=False):
        principal_turn_lock(session)
        turn = Turn.objects.create(session=session, **fields)
        dispatch_next(session.id, session)
    return turn


def dispatch_next(session_id: str, session: Session | None = None) -> str | None:
    """queued → active: start the oldest queued turn if no turn of the session is active; returns its id.

    Under a running-turn cap, only while the session's principal is below it
    (the caller holds `principal_turn_lock`).
    """
    with transaction.atomic(savepoint=False):
        if running_turn_cap():
            session = session or Session.objects.get(pk=session_id)
            if not _under_cap(session):
                return None
        queued = Turn.objects.filter(session_id=session_id, status=Turn.Status.QUEUED).order_by(
            "created_at", "id").values_list("id", flat=True).first()
        if queued is None or not Session.take_lock(session_id, queued, Session.Status.RUNNING):
            return None
        _enqueue_on_commit(queued)
        return queued


def requeue_lost_task(turn_id: str, now: datetime, stale: datetime, retry_at: datetime) -> bool:
    """Enqueue again an active turn queued since before `stale` (its task may be lost).

    `lease_until` of a queued turn marks when it was last re-enqueued, so each
    sweep adds no further task; claiming is conditional, so a duplicate is harmless.
    """
    with transaction.atomic():
        won = Turn.mark_reenqueued(turn_id, now, stale, retry_at)
        if won:
            _enqueue_on_commit(turn_id)
    return bool(won)


# --- the direct tool call's lock ------------------------------------------------------


def lock_for_call(session: Session, turn: Turn, *, parks: bool) -> bool:
    """Take the session's lock for a direct tool call's turn, and insert the turn (in the caller's transaction).

    A parked call shows the session as awaiting approval; the status the
    session had is kept on the turn (read once the lock is ours, so no turn
    can change it meanwhile) and given back when the call settles.
    """
    if not Session.take_lock(session.pk, turn.pk):
        return False
    if parks:
        before = Session.objects.filter(pk=session.pk).values_list("status", flat=True).first()
        turn.state = {"sessionStatus": before}
        Session.set_status_while_active(session.pk, turn.pk, Session.Status.AWAITING_APPROVAL)
    turn.save(force_insert=True)  # the lock's FK to it is checked at commit
    return True


def release_call(session: Session, turn: Turn, events: Sequence[tuple[str, dict[str, Any]]], status: str,
                 hooks: Sequence[Hook] = ()) -> bool:
    """End a direct call's turn: its last events, the lock freed, the next queued turn started."""
    before = (turn.state or {}).get("sessionStatus")
    return settle(session, turn, events, status=status, session_status=before, hooks=hooks)


# --- park → requeue --------------------------------------------------------------------


def park(turn: Turn, state: dict[str, Any], events: Iterable[tuple[str, dict[str, Any]]],
         hooks: Sequence[Hook] = ()) -> bool:
    """running → awaiting_approval; the session shows it. False if the turn was no longer ours.

    Every call may have been decided while the worker was parking; then the
    turn is queued again at once, since no decision is left to do it.
    """
    with transaction.atomic():
        append_events(turn.session_id, events, turn.id, hooks=hooks)
        Session.set_status_while_active(turn.session_id, turn.id, Session.Status.AWAITING_APPROVAL)
        if not turn.park(state):
            transaction.set_rollback(True)
            return False
        if not ToolCall.objects.filter(turn=turn, status=ToolCall.Status.AWAITING_APPROVAL).exists():
            resume_parked(turn.id)
    return True


def resume_parked(turn_id: str) -> bool:
    """awaiting_approval → queued, and enqueue it: a worker resumes it where it stopped."""
    with transaction.atomic():
        Session.set_status_while_active(None, turn_id, Session.Status.RUNNING, expect=Session.Status.AWAITING_APPROVAL)
        if not Turn.requeue(turn_id):
            transaction.set_rollback(True)
            return False
        _enqueue_on_commit(turn_id)
    return True


# --- interrupt --------------------------------------------------------------------------


def interrupt(turn_id: str) -> bool:
    """Ask a turn to stop. A parked turn has no worker to notice, so it is queued to wind down."""
    requested = Turn(pk=turn_id).request_interrupt()
    if requested:
        resume_parked(turn_id)
    return requested


def interrupt_in_flight(session_id: str, active_turn_id: str) -> bool:
    """Interrupt the active turn and every turn queued behind it.

    Interrupting only the active turn would let follow-ups queued behind it run
    in full: after a preempt the newest message would wait behind superseded
    ones, and after a stop the session would not come back to waiting. Queued
    turns end with `turn.failed` "turn interrupted" as soon as they start.
    """
    Turn.interrupt_queued(session_id)
    return interrupt(active_turn_id)


# --- settle ------------------------------------------------------------------------------


def settle(session: Session, turn: Turn, events: Sequence[tuple[str, dict[str, Any]]], *, status: str,
           error: str = "", messages: list[dict[str, Any]] | None = None, usage: Usage = None,
           count_usage: bool = False, session_status: str | None = None, hooks: Sequence[Hook] = (),
           timings: dict[str, Any] | None = None) -> bool:
    """running → completed | failed | interrupted, in one transaction with everything that goes with it:

    1. the turn's last events;
    2. the session: lock released, status, conversation, usage totals;
    3. the turn's outcome (and its timings), a conditional update: if the turn was no longer
       ours (recovery ended it), all of it is rolled back and this returns False;
    4. the session's next queued turn dispatched (chat sessions); under a
       running-turn cap, the principal's oldest waiting turns instead.
    """
    with transaction.atomic():
        principal_turn_lock(session)
        append_events(session.id, events, turn.id, hooks=hooks)
        update: dict[str, Any] = {"updated_at": timezone.now()}
        if session_status:
            update["status"] = session_status
        if messages is not None:
            # A failed turn's input stays in the conversation: the next turn's model sees what was asked.
            update["conversation"] = messages
        if count_usage and usage:
            # Totals count what is known; a turn whose usage is unknown adds nothing. Only a settle
            # writes the totals, under the lock this turn holds, so `session` as loaded once the
            # turn was claimed already has them: no need to read them again.
            update["usage"] = add_usage(session.usage or {}, usage)
        Session.release_lock(session.pk, turn.pk, **update)
        if not turn.end(status, error=error, usage=usage, timings=timings):
            transaction.set_rollback(True)  # not ours any more: whoever ended it settled it
            return False
        if running_turn_cap():
            dispatch_waiting(session)
        elif session.mode != Session.Mode.TASK:
            dispatch_next(session.id)
    return True


def ending_events(session: Session, status: str, error: str, code: str, usage: Usage,
                  duration_ms: float | None, timings: dict[str, Any] | None = None,
                  ) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """The events that end a turn, and the status the session takes."""
    task = session.mode == Session.Mode.TASK
    timing = {} if duration_ms is None else {"durationMs": duration_ms}
    if timings is not None:
        timing["timings"] = timings
    if status == Turn.Status.COMPLETED:
        return ([(EventType.TURN_COMPLETED, {"usage": usage, **timing}),
                 (EventType.SESSION_COMPLETED, {}) if task else (EventType.SESSION_WAITING, {})],
                Session.Status.COMPLETED if task else Session.Status.WAITING)
    code = code or ("interrupted" if status == Turn.Status.INTERRUPTED else "turn_failed")
    return ([(EventType.TURN_FAILED, {"error": error, "code": code, "usage": usage, **timing}),
             (EventType.SESSION_FAILED, {"error": error}) if task else (EventType.SESSION_WAITING, {})],
            Session.Status.FAILED if task else Session.Status.WAITING)
