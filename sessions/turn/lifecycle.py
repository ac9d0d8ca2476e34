"""The turn lifecycle: the one place that moves a session's execution lock
(`Session.active_turn`) and hands turns to django-q2.

Every move is a model transition (a conditional update that says whether it
won) composed here inside one transaction, and a turn is enqueued only from
`transaction.on_commit`, so a worker never looks for a row that has not
committed. The states and who triggers each move are drawn in ARCHITECTURE.md.

Every transaction here that writes several rows takes its locks in the one
order `sessions.turn.locks` writes down.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.hooks import Hook
from sessions.turn import extensions
from sessions.eventlog.events import append_events
from sessions.models import EventType, Session, Spend, ToolCall, Turn
from sessions.models.spend import utc_day
from sessions.sql.rows import insert_row
from sessions.sql.turns import session_head
from sessions.plumbing.taskqueue import enqueue
from sessions.turn.locks import principal_turn_lock
from sessions.turn.usage import Usage, add_usage

# The django-q task that runs a turn (a dotted path: queued tasks outlive a deploy).
RUN_TURN_TASK = "sessions.turn.engine.run_turn"


def enqueue_turn(turn_id: str) -> None:
    """Hand a turn to a worker. Only ever called from `on_commit` (or for a turn long committed)."""
    enqueue(RUN_TURN_TASK, turn_id, task_name=turn_id, ack_failure=True)


def _enqueue_on_commit(turn_id: str) -> None:
    transaction.on_commit(lambda: enqueue_turn(turn_id))


# --- the running-turn cap ----------------------------------------------------------------
#
# Under AGENTSITE_MAX_RUNNING_TURNS = N, at most N sessions of one principal hold a running
# slot: an active turn queued for a worker or running. A turn parked for approval waits for
# people, not for a worker: it keeps its session's lock but gives its slot back, and once its
# calls are decided (its session back to `running`) it waits for a slot like any other turn.
# A turn beyond the cap stays queued without the lock (or parked, decided), and when one of
# the principal's turns ends or parks, the principal's oldest waiting turn starts, whatever
# its session. The next turn of a session held back so gets `turn.queued`. A turn told to
# stop (its session stopped, or superseded by a preempting follow-up) never waits for a
# slot: it starts at once and ends as interrupted.

CAP_REASON = "running_turns_cap"


def running_turn_cap() -> int:
    return settings.AGENTSITE_MAX_RUNNING_TURNS


def _under_cap(session: Session) -> bool:
    cap = running_turn_cap()
    return not cap or Session.objects.holding_turns(session.principal_id, session.authenticator) < cap


def dispatch_waiting(session: Session) -> list[str]:
    """Start the oldest turns waiting for the cap among `session`'s principal's sessions, while below it.

    A queued turn takes its session's lock; a decided parked turn has it already and is queued again.
    """
    started: list[str] = []
    while _under_cap(session):
        waiting = Turn.objects.next_waiting(session.principal_id, session.authenticator)
        if waiting is None:
            break
        turn_id, session_id, parked = waiting
        if not (Turn.requeue(turn_id) if parked else Session.take_lock(session_id, turn_id, Session.Status.RUNNING)):
            break
        _enqueue_on_commit(turn_id)
        started.append(turn_id)
    return started


def held_back(session_id: str, turn_id: str, hooks: Sequence[Hook] = ()) -> None:
    """Tell the session's readers that its next turn waits for one of the principal's running slots."""
    append_events(session_id, [(EventType.TURN_QUEUED, {"waitingFor": CAP_REASON,
                                                        "runningTurnsCap": running_turn_cap()})], turn_id, hooks)


def _announce_head(session: Session, hooks: Sequence[Hook] = (), only: str | None = None) -> None:
    """`turn.queued` for the session's next turn if the cap holds it back (the session holds no active turn)."""
    if not Session.objects.filter(pk=session.pk, active_turn__isnull=True).exists():
        return
    head = session_head(session.pk)
    if head is not None and head[0] == (only or head[0]):
        held_back(session.pk, head[0], hooks)


def refill_slots(principal_id: str, authenticator: str) -> list[str]:
    """Start a principal's waiting turns while below the cap, in a transaction of its own.

    For the moves that free a slot without settling a turn (a session deleted
    mid-turn), and the recovery sweep's pass over principals with waiting turns.
    """
    owner = Session(principal_id=principal_id, authenticator=authenticator)
    if not running_turn_cap() or not _under_cap(owner):  # a read first: most sweeps find nothing to start
        return []
    with transaction.atomic():
        principal_turn_lock(owner)
        return dispatch_waiting(owner)


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
        else:
            held_back(session.id, turn.id, hooks)


def queue_turn(session: Session, **fields: Any) -> Turn:
    """A new queued turn; it starts at once if the session is free (else when the active turn settles)."""
    with transaction.atomic(savepoint=False):
        principal_turn_lock(session)
        turn = Turn.objects.create(session=session, **extensions.turn_fields(), **fields)
        if dispatch_next(session.id, session) is None and running_turn_cap():
            _announce_head(session, only=turn.id)
    return turn


def dispatch_next(session_id: str, session: Session | None = None, *, winding_down_only: bool = False) -> str | None:
    """queued → active: start the oldest queued turn if no turn of the session is active; returns its id.

    Under a running-turn cap, only while the session's principal is below it
    (the caller holds `principal_turn_lock`), unless the turn is told to stop:
    it winds down at once. `winding_down_only`: start it only in that case.
    """
    with transaction.atomic(savepoint=False):
        head = session_head(session_id)  # written out: every settle asks it
        if head is None:
            return None
        queued, winding_down = head
        if not winding_down and (winding_down_only or running_turn_cap()):
            session = session or Session.objects.get(pk=session_id)
            if winding_down_only or not _under_cap(session):
                return None
        if not Session.take_lock(session_id, queued, Session.Status.RUNNING):
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
        principal_turn_lock(turn.session)
        append_events(turn.session_id, events, turn.id, hooks=hooks)
        Session.set_status_while_active(turn.session_id, turn.id, Session.Status.AWAITING_APPROVAL)
        if not turn.park(state):
            transaction.set_rollback(True)
            return False
        if not ToolCall.objects.filter(turn=turn, status=ToolCall.Status.AWAITING_APPROVAL).exists():
            resume_parked(turn.id, hooks=hooks)
        elif running_turn_cap():
            dispatch_waiting(turn.session)  # its slot is free while people decide
    return True


def resume_parked(turn_id: str, *, winding_down: bool = False, hooks: Sequence[Hook] = ()) -> bool:
    """awaiting_approval → queued, and enqueue it: a worker resumes it where it stopped.

    Under a running-turn cap a decided turn takes a slot again: at once while
    the principal is below the cap and no older turn waits, else it stays
    parked with its session `running` until a slot frees (`dispatch_waiting`).
    A turn told to stop (`winding_down`) does not wait. The caller holds
    `principal_turn_lock` (it comes first in the transaction: `sessions.turn.locks`).
    """
    capped = bool(running_turn_cap()) and not winding_down
    session = Session.objects.filter(active_turn=turn_id).first() if capped else None
    with transaction.atomic():
        Session.set_status_while_active(None, turn_id, Session.Status.RUNNING, expect=Session.Status.AWAITING_APPROVAL)
        if session is None:
            if capped or not Turn.requeue(turn_id):
                transaction.set_rollback(True)
                return False
            _enqueue_on_commit(turn_id)
            return True
        if not Turn.objects.filter(pk=turn_id, status=Turn.Status.AWAITING_APPROVAL).exists():
            transaction.set_rollback(True)
            return False
        if turn_id not in dispatch_waiting(session):
            held_back(session.pk, turn_id, hooks)
    return True


# --- interrupt --------------------------------------------------------------------------


def interrupt(turn_id: str) -> bool:
    """Ask a turn to stop. A parked turn has no worker to notice, so it is queued to wind down;
    so is one waiting for the running-turn cap, at the head of a session holding no active turn."""
    requested = Turn(pk=turn_id).request_interrupt()
    if requested:
        resume_parked(turn_id, winding_down=True)
        waiting = Session.objects.filter(turns=turn_id, active_turn__isnull=True).first() if running_turn_cap() else None
        if waiting is not None:
            with transaction.atomic():
                principal_turn_lock(waiting)
                dispatch_next(waiting.pk, waiting)
    return requested


def interrupt_in_flight(session_id: str, active_turn_id: str, sparing: tuple[str, ...] = ()) -> bool:
    """Interrupt the active turn and every turn queued behind it.

    Interrupting only the active turn would let follow-ups queued behind it run
    in full: after a preempt the newest message would wait behind superseded
    ones, and after a stop the session would not come back to waiting. Queued
    turns end with `turn.failed` "turn interrupted" as soon as they start.
    `sparing`: triggers whose queued turns are not superseded (a preempt spares
    other agents' messages: they were sent, not said again).
    """
    Turn.interrupt_queued(session_id, sparing)
    return interrupt(active_turn_id)


def stop_turns(session: Session) -> bool:
    """Interrupt the session's active turn and those queued behind it; False if it has none.

    A session holding no active turn may have turns waiting for the running-turn
    cap: they are told to stop and started at once, whatever the cap, so each
    ends as interrupted now rather than running when a slot frees.
    """
    active = Session.objects.filter(pk=session.pk).values_list("active_turn_id", flat=True).first()
    if active:
        return interrupt_in_flight(session.pk, active)
    with transaction.atomic():
        principal_turn_lock(session)
        # Read again under the lock: a slot may have been handed to one of its turns meanwhile.
        active = Session.objects.filter(pk=session.pk).values_list("active_turn_id", flat=True).first()
        if active:
            return interrupt_in_flight(session.pk, active)
        if not Turn.interrupt_queued(session.pk):
            return False
        dispatch_next(session.pk, session)
    return True


# --- settle ------------------------------------------------------------------------------


def settle(session: Session, turn: Turn, events: Sequence[tuple[str, dict[str, Any]]], *, status: str,
           error: str = "", messages: list[dict[str, Any]] | None = None, usage: Usage = None,
           count_usage: bool = False, session_status: str | None = None, hooks: Sequence[Hook] = (),
           timings: dict[str, Any] | None = None, also: Callable[[], None] | None = None,
           spend: Sequence[tuple[str, Usage]] = ()) -> bool:
    """running → completed | failed | interrupted, in one transaction with everything that goes with it:

    1. the turn's last events;
    2. the session: lock released, status, conversation, usage totals;
    3. the turn's outcome (and its timings), a conditional update: if the turn was no longer
       ours (recovery ended it), all of it is rolled back and this returns False;
       `also`: more writes that stand or fall with the turn's end (a reply to another agent);
       `spend`: the turn's model calls, as (model, usage), not charged to the ledger yet (`Spend`);
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
        if also is not None:
            also()
        if spend:
            Spend.charge(utc_day(), session.principal_id, session.authenticator, session.agent_id, spend)
        extensions.turn_settled(session, turn, status, usage, timings, events)  # metrics, turn line; A/B samples
        if running_turn_cap():
            dispatch_next(session.id, session, winding_down_only=True)
            dispatch_waiting(session)
            if session.mode != Session.Mode.TASK:
                _announce_head(session, hooks)
        elif session.mode != Session.Mode.TASK:
            dispatch_next(session.id)
    return True


def ending_events(session: Session, status: str, error: str, code: str, usage: Usage,
                  duration_ms: float | None, timings: dict[str, Any] | None = None, trace_id: str = "",
                  ) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """The events that end a turn, and the status the session takes (`traceId` when the turn is traced)."""
    task = session.mode == Session.Mode.TASK
    timing = {} if duration_ms is None else {"durationMs": duration_ms}
    if timings is not None:
        timing["timings"] = timings
    if trace_id:
        timing["traceId"] = trace_id
    if status == Turn.Status.COMPLETED:
        return ([(EventType.TURN_COMPLETED, {"usage": usage, **timing}),
                 (EventType.SESSION_COMPLETED, {}) if task else (EventType.SESSION_WAITING, {})],
                Session.Status.COMPLETED if task else Session.Status.WAITING)
    code = code or ("interrupted" if status == Turn.Status.INTERRUPTED else "turn_failed")
    return ([(EventType.TURN_FAILED, {"error": error, "code": code, "usage": usage, **timing}),
             (EventType.SESSION_FAILED, {"error": error}) if task else (EventType.SESSION_WAITING, {})],
            Session.Status.FAILED if task else Session.Status.WAITING)
