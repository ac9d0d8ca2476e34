"""Reminders: run-time timers bound to one session, and `ctx.host.reminders` that makes them.

Prompt-form reminders wake their session with a `message.received` of
source `reminder`, coalesced behind a running turn. Run-form reminders call
a Python handler that lives only in the memory of the process that created
it; the handler's process fires them, and once that process is gone they
are disarmed with `handler_lost_on_restart`. A firing is claimed with a
conditional update, so it happens once however many processes tick.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable

from django.db.models import F
from django.utils import timezone

from agents.schedules import cron_problem, next_after
from sessions.admission import AdmissionError, submit_message
from sessions.models import Reminder, Session, Turn
from sessions.processes import process_gone
from sessions.processes import process_id as owner_id
from sessions.ticker import ensure_ticker

if TYPE_CHECKING:
    from sessions.host import Host

log = logging.getLogger(__name__)

# ASCII only: \d would also take '١' (Arabic-Indic one), which int() reads as 1.
DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$", re.ASCII)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
RUN_RESULTS = ("stop", "skip", "delivered")


class TimerError(ValueError):
    """A reminder that cannot be made; the message says what to fix."""

    def __init__(self, message: str, code: str = "invalid_reminder", status: int = 400):
        super().__init__(message)
        self.code = code
        self.status = status


# Far enough for any reminder; past it, timedelta and datetime arithmetic overflow.
MAX_DURATION = timedelta(days=3650)


def parse_duration(text: Any) -> timedelta:
    match = DURATION.match(text) if isinstance(text, str) else None
    if not match or int(match.group(1)) == 0:
        raise TimerError(f"{text!r} is not a duration: use a number and a unit, e.g. '90s', '20m', '2h', '1d'")
    seconds = int(match.group(1)) * UNITS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise TimerError(f"{text!r} is too long: durations go up to {MAX_DURATION.days}d (ten years)")
    return timedelta(seconds=seconds)


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


# --- reminders ---------------------------------------------------------------

_handlers: dict[str, Callable[[Any], Any]] = {}


def create_reminder(
    session: Session,
    *,
    delay: str | None = None,
    every: str | None = None,
    cron: str | None = None,
    prompt: str = "",
    until: str = "",
    title: str = "",
    run: Callable[[Any], Any] | None = None,
    created_by: dict | None = None,
    now: datetime | None = None,
) -> Reminder:
    """Arm a reminder on a chat session: exactly one of delay/every/cron, and a prompt or a handler."""
    now = now or timezone.now()
    given = [(k, v) for k, v in (("delay", delay), ("every", every), ("cron", cron)) if v]
    if len(given) != 1:
        raise TimerError("give exactly one of delay ('20m'), every ('30m') or cron ('0 9 * * 1-5')")
    kind, spec = given[0]
    if kind == "cron":
        if problem := cron_problem(spec):
            raise TimerError(problem)
        first = next_after(spec, now)
    else:
        first = now + parse_duration(spec)
    if run is None and not (prompt or "").strip():
        raise TimerError("a reminder needs a prompt (the message that wakes the session) or a run handler")
    if run is not None and not callable(run):
        raise TimerError("run must be a function taking the reminder context")
    current = Session.objects.filter(pk=session.pk).values_list("mode", flat=True).first()
    if current is None:
        raise TimerError("the session was deleted", "session_not_found", 404)
    if current == Session.Mode.TASK:
        raise TimerError("reminders wake a conversation: task sessions end after one turn and cannot take them",
                         "task_session", 409)
    reminder = Reminder.objects.create(
        session=session, agent_id=session.agent_id, title=title or (prompt or "").strip()[:80], kind=kind, spec=spec,
        prompt=prompt or "", until=until or "", handler_owner=owner_id() if run else "", next_fire_at=first,
        created_by=created_by or {},
    )
    if run is not None:
        _handlers[reminder.id] = run
        ensure_ticker()
    return reminder


def cancel_reminder(reminder: Reminder, reason: str = "cancelled") -> bool:
    _handlers.pop(reminder.id, None)
    return reminder.end(Reminder.Status.CANCELLED, reason)


def cancel_session_reminders(session: Session, reason: str = "session_deleted") -> int:
    count = 0
    for reminder in Reminder.objects.filter(session=session, status=Reminder.Status.ARMED):
        count += cancel_reminder(reminder, reason)
    return count


def claim_reminder(reminder: Reminder, due: datetime, now: datetime) -> bool:
    nxt = next_due(reminder.kind, reminder.spec, due, now)
    update: dict[str, Any] = {"next_fire_at": nxt, "last_fired_at": now, "fire_count": F("fire_count") + 1}
    if nxt is None:
        update.update(status=Reminder.Status.DONE, reason="fired")
    won = Reminder.objects.filter(pk=reminder.pk, status=Reminder.Status.ARMED, next_fire_at=due).update(**update)
    if won:
        reminder.refresh_from_db()
    return bool(won)


@dataclass
class ReminderContext:
    """What a run-form reminder's handler gets. Return "stop", "skip" or "delivered"."""

    reminder: Reminder
    session: Session
    fire_count: int

    @property
    def host(self) -> Host:
        from sessions.host import Host  # sessions.host offers this module's Reminders

        return Host(session=self.session, agent=self.session.agent)

    def followup(self, message: str) -> str:
        """Wake the session with a message (queued behind a running turn); returns the turn id."""
        return submit_message(self.session, message, admission=Turn.Admission.COALESCE, trigger=Turn.Trigger.REMINDER,
                              source_ref=self.reminder.id).turn.id


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
            result = handler(ReminderContext(reminder=reminder, session=session, fire_count=reminder.fire_count))
        except Exception as exc:
            log.exception("reminder handler %s failed", reminder.id)
            Reminder.objects.filter(pk=reminder.pk).update(reason=f"handler failed: {type(exc).__name__}: {exc}"[:200])
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
                       source_ref=reminder.id)
    except AdmissionError as exc:
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



@dataclass
class Reminders:
    """`ctx.host.reminders`: reminders bound to the current session, or to a session of the same agent."""

    session: Session | None
    agent: Any = None

    def _agent_id(self) -> int | None:
        return getattr(self.agent, "pk", None) or (self.session.agent_id if self.session else None)

    def _session(self, session_id: str | None) -> Session:
        if session_id:
            found = Session.objects.select_related("agent").filter(pk=session_id)
            if (agent_id := self._agent_id()) is not None:
                found = found.filter(agent_id=agent_id)  # an agent's code reaches its own conversations only
            found = found.first()
            if found is None:
                raise TimerError(f"no session {session_id!r} on this agent")
            return found
        if self.session is None:
            raise TimerError("no session here: pass session_id=")
        return self.session

    def create(self, *, session_id: str | None = None, **options: Any) -> Reminder:
        return create_reminder(self._session(session_id), **options)

    def list(self, *, session_id: str | None = None) -> list[Reminder]:
        return list(Reminder.objects.filter(session=self._session(session_id), status=Reminder.Status.ARMED))

    def cancel(self, reminder_id: str) -> bool:
        rows = Reminder.objects.filter(pk=reminder_id)
        if (agent_id := self._agent_id()) is not None:
            rows = rows.filter(agent_id=agent_id)
        reminder = rows.first()
        return bool(reminder) and cancel_reminder(reminder)

