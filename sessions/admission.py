"""Admission: how input becomes turns, one at a time per session.

Turns wait in the Turn table as `queued`. A session's `active_turn` is the
one allowed to run, taken with a conditional update, so however many web
and worker processes race, exactly one turn per session runs and the next
queued one is dispatched when it settles.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.models import Agent
from sessions import wakeups
from sessions.broker import shared_broker
from sessions.events import append_events
from sessions.models import Session, Turn

log = logging.getLogger(__name__)


class AdmissionError(Exception):
    """Input refused; `code` and `status` go straight to the HTTP error body."""

    def __init__(self, code: str, message: str, status: int = 409, details: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.details = details


@dataclass
class Admitted:
    session: Session
    turn: Turn
    continuation_token: str


def enqueue_turn(turn_id: str) -> None:
    """Hand a turn to a worker. Call only after the turn row has committed."""
    if getattr(settings, "AGENTSITE_INLINE_TURNS", False):
        from sessions.engine import run_turn

        run_turn(turn_id)
        return
    from django_q.tasks import async_task

    async_task("sessions.engine.run_turn", turn_id, task_name=turn_id, ack_failure=True, broker=shared_broker())


def dispatch_next(session_id: str) -> str | None:
    """Start the oldest queued turn if no turn of the session is active; returns its id."""
    with transaction.atomic(savepoint=False):
        queued = (Turn.objects.filter(session_id=session_id, status=Turn.Status.QUEUED)
                  .order_by("created_at", "id").values_list("id", flat=True).first())
        if queued is None:
            return None
        won = Session.objects.filter(pk=session_id, active_turn__isnull=True).update(
            active_turn=queued, status=Session.Status.RUNNING
        )
        if not won:
            return None
        transaction.on_commit(lambda: enqueue_turn(queued))
        return queued


def _default_title(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:80] if lines else ""


def resume_parked(turn_id: str) -> bool:
    """Queue a turn parked on approvals again; a worker resumes it where it stopped."""
    with transaction.atomic():
        won = Turn.objects.filter(pk=turn_id, status=Turn.Status.AWAITING_APPROVAL).update(status=Turn.Status.QUEUED)
        if won:
            transaction.on_commit(lambda: enqueue_turn(turn_id))
    return bool(won)


def interrupt(turn_id: str) -> bool:
    """Ask a turn to stop. A parked turn has no worker to notice, so it is queued to wind down."""
    requested = Turn(pk=turn_id).request_interrupt()
    if requested:
        resume_parked(turn_id)
    return requested


def start_session(
    agent: Agent,
    principal,
    message: str,
    *,
    title: str = "",
    mode: str = Session.Mode.CHAT,
    options: dict[str, Any] | None = None,
    channel: str = "http",
    trigger: str = Turn.Trigger.USER,
    source_ref: str = "",
) -> Admitted:
    """Create a session on the agent's active deployment and queue its first turn."""
    deployment = agent.active_deployment
    if deployment is None:
        raise AdmissionError("agent_not_deployed", f"agent {agent.slug!r} has no active deployment", 409)
    hooks = Session(agent=agent, deployment=deployment).hooks()  # loaded before the write lock is taken
    with transaction.atomic():
        # A new session's first turn is its active turn from the start (the FK is checked at commit).
        turn = Turn(trigger=trigger, message=message, source_ref=source_ref)
        session = Session(
            agent=agent,
            deployment=deployment,
            channel=channel,
            mode=mode,
            status=Session.Status.RUNNING,
            active_turn_id=turn.id,
            title=title or _default_title(message),
            principal_id=principal.principal_id,
            principal_type=principal.principal_type,
            authenticator=principal.authenticator,
            options=options or {},
        )
        token = session.issue_token()
        session.save(force_insert=True)
        turn.session = session
        turn.save(force_insert=True)
        append_events(
            session.id,
            [
                ("session.started", {
                    "mode": session.mode,
                    "title": session.title,
                    "channel": channel,
                    "agent": agent.slug,
                    "principal": principal.as_dict(),
                    "options": session.options,
                }),
                ("agent.bound", {
                    "agent": agent.slug,
                    "deployment": {"version": deployment.version, "contentHash": deployment.content_hash},
                    "model": deployment.manifest.get("model", ""),
                }),
            ],
            hooks=hooks,
        )
        transaction.on_commit(lambda: enqueue_turn(turn.id))
    # The turn may already have run (inline turns): report the status as it is now.
    session.status = Session.objects.filter(pk=session.pk).values_list("status", flat=True).first() or session.status
    return Admitted(session=session, turn=turn, continuation_token=token)


def submit_message(
    session: Session,
    message: str,
    *,
    admission: str = "preempt",
    continuation_token: str | None = None,
    trigger: str = Turn.Trigger.USER,
    source_ref: str = "",
) -> Admitted:
    """A follow-up. `preempt` interrupts a running turn first; `coalesce` queues behind it."""
    if admission not in ("preempt", "coalesce"):
        raise AdmissionError("invalid_admission", "admission must be 'preempt' or 'coalesce'", 400)
    with transaction.atomic():
        # Re-read under the write lock: a concurrent follow-up may have rotated the token.
        session = Session.objects.select_for_update().get(pk=session.pk)
        if session.mode == Session.Mode.TASK:
            raise AdmissionError("task_session", "task sessions do not accept follow-ups", 409)
        if continuation_token is not None and not session.token_matches(continuation_token):
            raise AdmissionError(
                "stale_continuation_token",
                "this continuation token has been superseded; use the latest token from the last follow-up",
                409,
            )
        if admission == "preempt" and session.active_turn_id:
            interrupt_in_flight(session.pk, session.active_turn_id)
        turn = Turn.objects.create(session=session, trigger=trigger, message=message, admission=admission,
                                   source_ref=source_ref)
        token = session.issue_token()
        Session.objects.filter(pk=session.pk).update(continuation_token_hash=session.continuation_token_hash)
        dispatch_next(session.id)
        # Readers of an idle session poll slowly; tell them a turn is coming.
        transaction.on_commit(lambda: wakeups.publish(session.id, -1))
    session.refresh_from_db()
    return Admitted(session=session, turn=turn, continuation_token=token)


def stop_session(session: Session) -> bool:
    """Interrupt the running turn, if any, and the follow-ups queued behind it.

    Each ends with `turn.failed` "turn interrupted".
    """
    turn_id = Session.objects.filter(pk=session.pk).values_list("active_turn_id", flat=True).first()
    if not turn_id:
        return False
    return interrupt_in_flight(session.pk, turn_id)


def interrupt_in_flight(session_id: str, active_turn_id: str) -> bool:
    """Interrupt the active turn and every turn queued behind it.

    Interrupting only the active turn would let follow-ups queued behind it run
    in full: after a preempt the newest message would wait behind superseded
    ones, and after a stop the session would not come back to waiting. Queued
    turns end with `turn.failed` "turn interrupted" as soon as they start.
    """
    Turn.objects.filter(session_id=session_id, status=Turn.Status.QUEUED).update(interrupt_requested=True)
    return interrupt(active_turn_id)


def delete_session(session: Session) -> None:
    from sessions.timers import cancel_session_reminders

    stop_session(session)
    cancel_session_reminders(session)
    with transaction.atomic():
        # Lock the row before the cascade is collected. A worker still finishing
        # the turn would otherwise add events after the collection, and on
        # PostgreSQL the delete then fails its deferred foreign-key check; with
        # the lock, the worker's next append waits and finds the session gone.
        Session.objects.select_for_update().filter(pk=session.pk).values_list("pk", flat=True).first()
        Session.objects.filter(pk=session.pk).delete()
