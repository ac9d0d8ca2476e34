"""Schedules and reminders: durable timers that fire exactly once per due time.

The next due time of each timer is stored; a firing is claimed with a
conditional update (`next_fire_at` still equal to the due time the claimer
saw), so however many processes tick, one of them fires each due time.

Catch-up policy: a timer found overdue (the server was down) fires once,
then resumes its cadence from now: cron takes its next time after now, and
`every` its next multiple of the interval after now. Missed firings are not
replayed one by one.

Schedules live here; reminders in sessions.timers.reminders (firing) and
sessions.host.reminders (arming), whose names are importable from here too;
`ctx.host` in sessions.host.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.discovery import load_deployment
from agents.schedules import next_after
from agents.secrets.store import acting_for
from sessions.metrics import families as metrics
from sessions.turn.admission import AdmissionError, start_session
from sessions.direct.calls import call_tool
from sessions.host import Host
from sessions.models import Reminder, Schedule, Session, Turn
from sessions.principal import Principal
from sessions.sql import timers as sql_timers
from sessions.timers.reminders import (  # noqa: F401 (the timers API: views, the admin and tests import it here)
    MAX_DURATION,
    ReminderContext,
    Reminders,
    TimerError,
    _handlers,
    cancel_reminder,
    cancel_session_reminders,
    claim_reminder,
    create_reminder,
    disarm_lost_handlers,
    ensure_ticker,
    fire_reminder_now,
    next_due,
    owner_id,
    parse_duration,
    reminder_message,
    run_reminder,
)

log = logging.getLogger(__name__)


# --- schedules ---------------------------------------------------------------


def sync_schedules(agent, loaded, now: datetime | None = None) -> None:
    """Make the agent's Schedule rows match its active deployment's schedule files."""
    now = now or timezone.now()
    seen = set()
    for item in loaded.schedules.values():
        seen.add(item.id)
        row = Schedule.objects.filter(agent=agent, schedule_id=item.id).first()
        if row is None:
            Schedule.objects.create(agent=agent, schedule_id=item.id, kind=item.kind, cron=item.cron, title=item.title,
                                    prompt=item.prompt, next_fire_at=next_after(item.cron, now))
            continue
        changed = row.cron != item.cron or not row.active
        row.kind, row.title, row.prompt, row.active = item.kind, item.title, item.prompt, True
        if changed:
            row.cron = item.cron
            row.next_fire_at = next_after(item.cron, now)
        row.save()
    Schedule.retire_missing(agent, seen)


def schedule_principal(schedule: Schedule) -> Principal:
    return Principal(authenticator="schedule", principal_id=f"schedule:{schedule.agent.slug}/{schedule.schedule_id}",
                     principal_type="app")


def run_schedule(schedule: Schedule, due: datetime) -> list[str]:
    """Do the work of one claimed firing; returns the sessions it started."""
    agent = schedule.agent
    principal = schedule_principal(schedule)
    session_ids: list[str] = []
    error = ""
    try:
        if schedule.kind == Schedule.Kind.MARKDOWN:
            admitted = start_session(agent, principal, schedule.prompt, title=schedule.title, mode=Session.Mode.TASK,
                                     channel="schedule", trigger=Turn.Trigger.SCHEDULE,
                                     source_ref=schedule.schedule_id)
            session_ids.append(admitted.session.id)
        else:
            loaded = load_deployment(agent.active_deployment).schedules.get(schedule.schedule_id)
            if loaded is None or loaded.run is None:
                raise RuntimeError("the active deployment has no handler for this schedule")
            context = ScheduleContext(schedule=schedule, due=due, principal=principal, session_ids=session_ids)
            with acting_for(agent.slug):
                loaded.run(context)
    except AdmissionError as exc:  # a spent budget, say: no bug, so no traceback; recorded as any failure
        log.warning("schedule %s did not start: %s (%s)", schedule, exc.message, exc.code)
        error = f"{exc.code}: {exc.message}"
    except Exception as exc:  # a failing handler is recorded; the schedule keeps its cadence
        log.exception("schedule %s failed", schedule)
        error = f"{type(exc).__name__}: {exc}"
    schedule.record_run(session_ids, error)
    return session_ids


@dataclass
class ScheduleContext:
    """What a handler schedule's `run(ctx)` gets."""

    schedule: Schedule
    due: datetime
    principal: Any
    session_ids: list[str] = field(default_factory=list)

    @property
    def host(self) -> "Host":
        return Host(session=None, agent=self.schedule.agent)

    def receive(self, message: str, *, title: str = "", mode: str = "chat") -> str:
        """Hand work to the HTTP channel: start a conversation as the schedule's app principal."""
        admitted = start_session(self.schedule.agent, self.principal, message, title=title or self.schedule.title,
                                 mode=mode, channel="http", trigger=Turn.Trigger.SCHEDULE,
                                 source_ref=self.schedule.schedule_id)
        self.session_ids.append(admitted.session.id)
        return admitted.session.id

    def call_tool(self, name: str, input: dict[str, Any] | None = None) -> Any:
        return call_tool(self.schedule.agent, name, input or {})["output"]


def fire_schedule_now(schedule: Schedule, now: datetime | None = None) -> list[str] | None:
    """Fire the current due time by hand (dev mode): exactly once, through the claim; None if lost."""
    now = now or timezone.now()
    due = schedule.next_fire_at
    if due is None or not schedule.claim(due, now):
        return None
    return run_schedule(schedule, due)


# --- the tick ------------------------------------------------------------------


def fire_due(now: datetime | None = None, *, schedules: bool | None = None) -> int:
    """One pass over due timers; returns how many firings this process claimed."""
    now = now or timezone.now()
    return _fire(now, sql_timers.due(now), schedules)


def _fire(now: datetime, due: sql_timers.TimersDue, schedules: bool | None) -> int:
    if schedules is None:
        schedules = settings.AGENTSITE_SCHEDULES
    fired = 0
    if schedules and due.schedules:
        for schedule in Schedule.objects.select_related("agent__active_deployment").filter(active=True, next_fire_at__lte=now):
            if schedule.claim(schedule.next_fire_at, now):
                fired += 1
                metrics.timer_fired("schedule", (now - schedule.next_fire_at).total_seconds())
                run_schedule(schedule, schedule.next_fire_at)
    if not due.reminders:
        return fired
    me = owner_id()
    for reminder in Reminder.objects.filter(status=Reminder.Status.ARMED, next_fire_at__lte=now):
        if reminder.is_run_form and reminder.handler_owner != me:
            continue  # its handler lives in another process, which fires it
        due_at = reminder.next_fire_at
        if claim_reminder(reminder, due_at, now):
            fired += 1
            metrics.timer_fired("reminder", (now - due_at).total_seconds())
            run_reminder(reminder)
    return fired


def tick(now: datetime | None = None) -> int:
    """What a process's ticker does each interval, dev mode aside: one cheap read says what has work
    (most passes find nothing), and only that is read through the ORM."""
    now = now or timezone.now()
    due = sql_timers.due(now)
    if due.handlers:
        disarm_lost_handlers()
    if settings.AGENTSITE_DEV:
        return 0  # dev mode: timers fire only by hand, through the dev routes
    return _fire(now, due, None)
