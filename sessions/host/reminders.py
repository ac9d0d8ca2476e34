"""`ctx.host.reminders`: arming and cancelling run-time reminders bound to one session.

A reminder wakes its chat session with a prompt, or calls a Python handler
(the run form) that lives only in the memory of the process that created it
(`_handlers`). Firing them is sessions.timers.reminders, which builds the handler's
context on top of `ctx.host`; this module never fires, so `sessions.host`
imports it and the firing imports `sessions.host`, never the other way.

A reminder set in a turn that descends from agents' messages keeps that
turn's root and hops in `created_by["origin"]`, and the turns it wakes carry
them (sessions.messaging.limits): the agents' turn budget and hop count go
on from where the turn that set it was, however often it fires.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from django.utils import timezone

from agents.schedules import cron_problem, next_after
from sessions.eventlog.events import act_on
from sessions.messaging.limits import descent
from sessions.models import Reminder, Session
from sessions.principal import Principal
from sessions.plumbing.processes import process_id as owner_id
from sessions.timers.ticker import ensure_ticker

# ASCII only: \d would also take '١' (Arabic-Indic one), which int() reads as 1.
DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$", re.ASCII)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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


# Run-form handlers of this process, by reminder id.
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
    turn_id: str = "",
    origin: dict | None = None,
) -> Reminder:
    """Arm a reminder on a chat session: exactly one of delay/every/cron, and a prompt or a handler.

    `turn_id`: the turn setting it (a tool's); when that turn descends from agents' messages, the
    reminder carries its root and hops (`created_by["origin"]`) into every turn it wakes. `origin`:
    what code acting for such a turn outside it passes on (a reminder's handler, a channel's)."""
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
    made_by = {k: v for k, v in (created_by or {}).items() if k != "origin"}  # only the turn says its descent
    if carried := descent(turn_id) or (dict(origin) if origin else None):
        made_by["origin"] = carried
    reminder = Reminder.objects.create(
        session=session, agent_id=session.agent_id, title=title or (prompt or "").strip()[:80], kind=kind, spec=spec,
        prompt=prompt or "", until=until or "", handler_owner=owner_id() if run else "", next_fire_at=first,
        created_by=made_by,
    )
    if run is not None:
        _handlers[reminder.id] = run
        ensure_ticker()
    return reminder


def cancel_reminder(reminder: Reminder, reason: str = "cancelled", by: Principal | None = None) -> bool:
    """Cancel an armed reminder; False if it had already ended. An operator (`by`, a principal)
    cancelling a reminder of someone else's session is recorded there as `operator.acted`."""
    _handlers.pop(reminder.id, None)
    if by is None or reminder.session_id is None:
        return reminder.end(Reminder.Status.CANCELLED, reason)
    return act_on(reminder.session, by, "cancel_reminder", lambda: reminder.end(Reminder.Status.CANCELLED, reason),
                  reminderId=reminder.id)


def cancel_session_reminders(session: Session, reason: str = "session_deleted") -> int:
    count = 0
    for reminder in Reminder.objects.filter(session=session, status=Reminder.Status.ARMED):
        count += cancel_reminder(reminder, reason)
    return count


@dataclass
class Reminders:
    """`ctx.host.reminders`: reminders bound to the current session, or to a session of the same agent."""

    session: Session | None
    agent: Any = None
    turn_id: str = ""  # the turn whose tool sets reminders here, if any
    origin: dict | None = None  # else the agents' root and hops the code setting them acts under

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
        return create_reminder(self._session(session_id), **options, turn_id=self.turn_id, origin=self.origin)

    def list(self, *, session_id: str | None = None) -> list[Reminder]:
        return list(Reminder.objects.filter(session=self._session(session_id), status=Reminder.Status.ARMED))

    def cancel(self, reminder_id: str) -> bool:
        rows = Reminder.objects.filter(pk=reminder_id)
        if (agent_id := self._agent_id()) is not None:
            rows = rows.filter(agent_id=agent_id)
        reminder = rows.first()
        return bool(reminder) and cancel_reminder(reminder)
