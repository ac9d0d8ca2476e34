"""The ticker's question each second: is any schedule or reminder due?

Almost every pass of a worker's ticker finds nothing due, and asking it
through the ORM (the schedules' query joins each one's agent and release)
cost the pass more CPU than the rest of its jobs: a tenth of a streaming
worker's CPU on PostgreSQL went to the ticker. One written-out statement
answers both (and whether a run-form reminder's handler needs checking), and
`sessions.timers.schedules.tick` reads the rows through the ORM only when it
says something is due.
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from django.db import connection

from sessions.models import Reminder, Schedule
from sessions.sql import written_out


class TimersDue(NamedTuple):
    schedules: bool  # an active schedule is due
    reminders: bool  # an armed reminder is due
    handlers: bool  # an armed run-form reminder exists: its handler's process may have died


def _due_orm(now: datetime) -> TimersDue:
    armed = Reminder.objects.filter(status=Reminder.Status.ARMED)
    return TimersDue(Schedule.objects.filter(active=True, next_fire_at__lte=now).exists(),
                     armed.filter(next_fire_at__lte=now).exists(),
                     armed.exclude(handler_owner="").exists())


@written_out(orm=_due_orm, comparable=TimersDue._asdict)
def due(now: datetime) -> TimersDue:
    """What of the timers has work at `now`."""
    at = Schedule._meta.get_field("next_fire_at").get_db_prep_value(now, connection)
    reminders = Reminder._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS(SELECT 1 FROM {Schedule._meta.db_table} WHERE active AND next_fire_at <= %s), "
            f"EXISTS(SELECT 1 FROM {reminders} WHERE status = %s AND next_fire_at <= %s), "
            f"EXISTS(SELECT 1 FROM {reminders} WHERE status = %s AND handler_owner <> '')",
            [at, Reminder.Status.ARMED.value, at, Reminder.Status.ARMED.value])
        return TimersDue(*(bool(flag) for flag in cursor.fetchone()))
