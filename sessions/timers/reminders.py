"""Firing reminders: run-time timers bound to one session (armed through `ctx.host.reminders`).

Prompt-form reminders wake their session with a `message.received` of
source `reminder`, coalesced behind a running turn. Run-form reminders call
a Python handler that lives only in the memory of the process that created
it; the handler's process fires them, and once that process is gone they
are disarmed with `handler_lost_on_restart`. A firing is claimed with a
conditional update (`Reminder.claim`), so it happens once however many
processes tick.

Arming and cancelling live in sessions.host.reminders (what `ctx.host`
offers); their names are importable from here too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from agents.schedules import next_after
from agents.secrets.store import acting_for
from sessions.turn.admission import AdmissionError, submit_message
from sessions.host import Host
from sessions.host.reminders import (  # noqa: F401 (the reminders API: callers import it here)
    MAX_DURATION,
    Reminders,
    TimerError,
    _handlers,
    cancel_reminder,
    cancel_session_reminders,
    create_reminder,
    owner_id,
    parse_duration,
)
from sessions.models import Reminder, Session, Turn
from sessions.plumbing.processes import process_gone
from sessions.timers.ticker import ensure_ticker  # noqa: F401 (the timers API names it)

log = logging.getLogger(__name__)

RUN_RESULTS = ("stop", "skip", "delivered")


def next_due(kind: str, spec: str, due: datetime, now: datetime) -> datetime | None:
    """When a timer that was due at `due` fires next, seen at `now` (catch-up: once, then the cadence)."""
    if kind == Reminder.Kind.DELAY:
        return None
    if kind == Reminder.Kind.EVERY:
        step = parse_duration(spec)
        nxt = due + step
        if nxt <= now:
            nxt += step * ((now - nxt) // step + 1)
        return nxt
    return next_after(spec, max(due, now))


def claim_reminder(reminder: Reminder, due: datetime, now: datetime) -> bool:
    """Own the firing due at `due`; the reminder moves on to its next due time (or is done)."""
    return reminder.claim(due, now, next_due(reminder.kind, reminder.spec, due, now))


@dataclass
class ReminderContext:
    """What a run-form reminder's handler gets. Return "stop", "skip" or "delivered"."""

    reminder: Reminder
    session: Session
    fire_count: int

    @property
    def host(self) -> Host:
        return Host(session=self.session, agent=self.session.agent, origin=carried(self.reminder) or None)

    def followup(self, message: str) -> str:
        """Wake the session with a message (queued behind a running turn); returns the turn id."""
        return submit_message(self.session, message, admission=Turn.Admission.COALESCE, trigger=Turn.Trigger.REMINDER,
                              source_ref=self.reminder.id, origin=carried(self.reminder)).turn.id


def carried(reminder: Reminder) -> dict[str, Any]:
    """The origin of a turn the reminder wakes: the root and hops of the agents' turn that set it,
    if one did (sessions.messaging.limits.root_of continues from them), else nothing."""
    origin = (reminder.created_by or {}).get("origin")
    return dict(origin) if isinstance(origin, dict) else {}


def reminder_message(reminder: Reminder) -> str:
    text = reminder.prompt.strip()
    until = reminder.until.strip()
    if until and reminder.kind == Reminder.Kind.DELAY:
        text += f"\n\n(A one-time reminder. It no longer applies once: {until})"
    elif until:
        text += f"\n\n(This is a recurring reminder. Stop when: {until})"
    return text


def run_reminder(reminder: Reminder) -> None:
    """Do the work of one claimed firing."""
    session = Session.objects.select_related("agent").filter(pk=reminder.session_id).first() if reminder.session_id else None
    if session is None:
        cancel_reminder(reminder, "session_deleted")
        return
    if session.mode == Session.Mode.TASK:
        cancel_reminder(reminder, "task_session")
        return
    if reminder.is_run_form:
        handler = _handlers.get(reminder.id)
        if handler is None:
            reminder.end(Reminder.Status.DISARMED, "handler_lost_on_restart")
            return
        try:
            with acting_for(session.agent.slug):
                result = handler(ReminderContext(reminder=reminder, session=session, fire_count=reminder.fire_count))
        except Exception as exc:
            log.exception("reminder handler %s failed", reminder.id)
            reminder.note(f"handler failed: {type(exc).__name__}: {exc}")
            return
        if result == "stop":
            cancel_reminder(reminder, "stopped_by_handler")
        elif result not in (None, "skip", "delivered"):
            log.warning("reminder handler %s returned %r; expected one of %s", reminder.id, result, RUN_RESULTS)
        if reminder.next_fire_at is None:
            _handlers.pop(reminder.id, None)
        return
    if Turn.objects.filter(session=session, trigger=Turn.Trigger.REMINDER, source_ref=reminder.id,
                           status=Turn.Status.QUEUED).exists():
        # Its last wake still waits behind a long (or parked) turn: that wake stands for this
        # firing too, instead of a pile of identical wakes running back to back later.
        return
    try:
        submit_message(session, reminder_message(reminder), admission=Turn.Admission.COALESCE, trigger=Turn.Trigger.REMINDER,
                       source_ref=reminder.id, origin=carried(reminder))
    except AdmissionError as exc:
        if exc.code == "budget_exceeded":  # this wake is skipped; the budget refills, the reminder keeps its cadence
            log.warning("reminder %s skipped a wake: %s", reminder.id, exc.message)
            return
        cancel_reminder(reminder, exc.code)


def fire_reminder_now(reminder: Reminder, now: datetime | None = None) -> bool:
    """Fire the current due time by hand (dev mode): exactly once; False if it was already taken.

    A run-form reminder can only fire in the process holding its handler: from any
    other live process this raises TimerError (409) and leaves it armed, rather than
    claiming the firing and disarming a handler that is alive elsewhere.
    """
    now = now or timezone.now()
    due = reminder.next_fire_at
    if reminder.status != Reminder.Status.ARMED or due is None:
        return False
    if (reminder.is_run_form and reminder.handler_owner != owner_id() and reminder.id not in _handlers
            and not process_gone(reminder.handler_owner)):
        raise TimerError(
            f"this reminder's run handler lives in the memory of process {reminder.handler_owner}, not this one; "
            "it fires there on that process's ticker (not under --dev). Prefer the prompt form to fire it by hand.",
            "handler_elsewhere", 409,
        )
    if not claim_reminder(reminder, due, now):
        return False
    run_reminder(reminder)
    return True


def disarm_lost_handlers() -> int:
    """Run-form reminders whose process is gone can never fire: disarm them, saying why."""
    count = 0
    for reminder in Reminder.objects.filter(status=Reminder.Status.ARMED).exclude(handler_owner=""):
        if reminder.handler_owner != owner_id() and process_gone(reminder.handler_owner):
            count += reminder.end(Reminder.Status.DISARMED, "handler_lost_on_restart")
        elif reminder.handler_owner == owner_id() and reminder.id not in _handlers:
            count += reminder.end(Reminder.Status.DISARMED, "handler_lost_on_restart")
    return count
