"""Admission: how input becomes turns, one at a time per session.

Turns wait in the Turn table as `queued`. A session's `active_turn` is the
one allowed to run, taken with a conditional update in sessions.turn.lifecycle,
so however many web and worker processes race, exactly one turn per session
runs and the next queued one is dispatched when it settles.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable

from django.db import transaction
from django.utils import timezone

from agents.models import Agent, Deployment
from sessions.eventlog import wakeups
from sessions.turn import extensions, lifecycle
from sessions.eventlog.events import act_on
from agents.discovery import load_deployment
from sessions.turn.lifecycle import dispatch_next, interrupt, interrupt_in_flight  # noqa: F401 (callers import them here)
from sessions.models import EventType, Session, Turn
from sessions.principal import Principal
from sessions.plumbing.taskqueue import runs_inline
from sessions.spend.budgets import Payer, payer, payer_of
from sessions.spend.meter import BudgetExceeded

log = logging.getLogger(__name__)


class AdmissionError(Exception):
    """Input refused; `code` and `status` go straight to the HTTP error body."""

    def __init__(self, code: str, message: str, status: int = 409, details: Any = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.details = details
        self.headers = headers or {}


@dataclass
class Admitted:
    session: Session
    turn: Turn
    continuation_token: str


def _default_title(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:80] if lines else ""


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
    workspace_files: list[dict[str, Any]] | None = None,
    channel_key_hash: str = "",
    channel_state: dict[str, Any] | None = None,
    model: str = "",
    origin: dict[str, Any] | None = None,
    deployment: Deployment | None = None,
) -> Admitted:
    """Create a session on the agent's active deployment (or on `deployment`, a scratch copy that
    `manage.py run --dir` made) and queue its first turn.

    `workspace_files` ({path, content, encoding}, checked by the channel) are
    written into the session's workspace when the turn starts. A custom
    channel passes its continuation key's hash (unique per agent and channel:
    a second session with the same key raises IntegrityError) and its starting state.
    `model`: one of the release's models to bind the session to (400
    `model_not_allowed` otherwise); blank: its A/B variant's, else the release's default.
    `origin`: who sent the first message, when another agent did (sessions.messaging).
    """
    deployment = deployment or agent.active_deployment
    if deployment is None:
        raise AdmissionError("agent_not_deployed", f"agent {agent.slug!r} has no active deployment", 409)
    check_model(deployment, model)
    check_budget(payer(principal.principal_id, principal.authenticator, agent.pk, deployment.manifest.get("budget")))
    hooks = Session.hooks_of(deployment)  # loaded before the write lock is taken
    variants = extensions.variants()
    experiments = variants.of(deployment)  # read before the write lock
    with transaction.atomic():
        turn = Turn(trigger=trigger, message=message, source_ref=source_ref, workspace_files=workspace_files or [],
                    origin=origin or {}, **extensions.turn_fields())
        session = Session(
            agent=agent,
            deployment=deployment,
            channel=channel,
            mode=mode,
            title=title or _default_title(message),
            principal_id=principal.principal_id,
            principal_type=principal.principal_type,
            authenticator=principal.authenticator,
            options=options or {},
            channel_key_hash=channel_key_hash,
            channel_state=channel_state or {},
        )
        token = session.issue_token()
        assigned = variants.enroll(session, message, experiments)
        session.model = model or bound_model(deployment, session.ab_variants)
        lifecycle.open_session(session, turn, [
            (EventType.SESSION_STARTED, {
                "mode": session.mode,
                "title": session.title,
                "channel": channel,
                "agent": agent.slug,
                "principal": principal.as_dict(),
                "options": session.options,
            }),
            (EventType.AGENT_BOUND, {
                "agent": agent.slug,
                "deployment": {"version": deployment.version, "contentHash": deployment.content_hash},
                "model": session.model,
            }),
            *assigned,
        ], hooks)
        transaction.on_commit(lambda: extensions.session_started(session))  # observers never raise
    if runs_inline():
        # The turn ran at commit, in this process: report the status it left.
        session.status = Session.objects.filter(pk=session.pk).values_list("status", flat=True).first() or session.status
    return Admitted(session=session, turn=turn, continuation_token=token)


def check_budget(payer: Payer) -> None:
    """429 `budget_exceeded` when a budget of the new turn's is spent, with Retry-After at its window's end."""
    if not payer.budgets or (over := payer.over()) is None:
        return
    budget, spent = over
    ends = budget.ends_at(timezone.now())
    retry_after = max(1, math.ceil((ends - timezone.now()).total_seconds()))
    raise AdmissionError("budget_exceeded", str(BudgetExceeded(budget, spent)), 429,
                         details={**budget.describe(), "spentUsd": float(spent), "refillsAt": ends.isoformat(),
                                  "retryAfter": retry_after},
                         headers={"Retry-After": str(retry_after)})


def check_model(deployment, model: str) -> None:
    """400 `model_not_allowed` unless `model` is blank or one of the release's models."""
    if model and model not in deployment.models:
        allowed = deployment.models
        raise AdmissionError("model_not_allowed", f"model {model!r} is not one this agent may run on; "
                             f"choose one of: {', '.join(allowed)}", 400, details={"allowed": allowed})


def bound_model(deployment, ab_variants: dict[str, str]) -> str:
    """What a new session runs on when it asks for nothing: its A/B variant's model, else the release's default."""
    if ab_variants:
        try:
            return extensions.variants().choose(load_deployment(deployment), ab_variants).model
        except Exception:  # the release cannot load: its turns will say why
            log.exception("cannot load %s to bind a session's model", deployment)
    return deployment.models[0] if deployment.models else ""


def submit_message(
    session: Session,
    message: str,
    *,
    admission: str = Turn.Admission.PREEMPT,
    continuation_token: str | None = None,
    trigger: str = Turn.Trigger.USER,
    source_ref: str = "",
    workspace_files: list[dict[str, Any]] | None = None,
    model: str = "",
    origin: dict[str, Any] | None = None,
) -> Admitted:
    """A follow-up. `preempt` interrupts a running turn first; `coalesce` queues behind it.

    `model`: when given, it must be the model the session is bound to (409
    `handoff_required` otherwise: moving a session to another model is a handoff).
    """
    if admission not in Turn.Admission.values:
        raise AdmissionError("invalid_admission", "admission must be 'preempt' or 'coalesce'", 400)
    if model and model != session.bound_model:
        raise AdmissionError(
            "handoff_required",
            f"this session runs on {session.bound_model!r}, not {model!r}: review the switch with "
            f"GET .../session/{session.id}/handoff?to={model} and perform it with POST .../handoff",
            409, details={"model": session.bound_model, "requested": model})
    check_budget(payer_of(session))
    with transaction.atomic():
        lifecycle.principal_turn_lock(session)  # before the session row: the lifecycle's lock order
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
        # A preempt supersedes what was said before, not what other agents sent: those still run.
        if admission == Turn.Admission.PREEMPT and session.active_turn_id:
            lifecycle.interrupt_in_flight(session.pk, session.active_turn_id, sparing=(Turn.Trigger.AGENT,))
        elif admission == Turn.Admission.PREEMPT and lifecycle.running_turn_cap():
            # Turns waiting for the running-turn cap are superseded too: they wind down at once.
            Turn.interrupt_queued(session.pk, sparing=(Turn.Trigger.AGENT,))
        token = session.rotate_token()
        turn = lifecycle.queue_turn(session, trigger=trigger, message=message, admission=admission,
                                    source_ref=source_ref, workspace_files=workspace_files or [], origin=origin or {})
        # Readers of an idle session poll slowly; tell them a turn is coming.
        wakeups.announce(session.id, -1)
    session.refresh_from_db()
    return Admitted(session=session, turn=turn, continuation_token=token)


def stop_session(session: Session, by: Principal | None = None) -> bool:
    """Interrupt the running turn, if any, and the follow-ups queued behind it or waiting
    for the running-turn cap.

    Each ends with `turn.failed` "turn interrupted". An operator (`by`) stopping someone
    else's session is recorded as `operator.acted`, only when something was stopped.
    """
    return act_on(session, by, "stop", lambda: lifecycle.stop_turns(session), lock_first=_turn_lock(session))


def stop_turn(turn: Turn, by: Principal | None = None) -> bool:
    """Interrupt one turn (the admin stops turns one by one). An operator stopping a turn of
    someone else's session is recorded as `operator.acted` with the turn's id, only when it was asked to stop."""
    return act_on(turn.session, by, "stop", lambda: lifecycle.interrupt(turn.pk), lock_first=_turn_lock(turn.session),
                  turnId=turn.pk)


def _turn_lock(session: Session) -> Callable[[], None]:
    """The principal's turn lock, which a stop may take (turns waiting for the cap): before the record."""
    return lambda: lifecycle.principal_turn_lock(session)

