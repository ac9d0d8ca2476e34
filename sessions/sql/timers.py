"""The ticker's question each second: is any schedule or reminder due?

Almost every pass of a worker's ticker finds nothing due, and asking it
through the ORM (the schedules' query joins each one's agent and release)
cost the pass more CPU than the rest of its jobs: a tenth of a streaming
worker's CPU on PostgreSQL went to the ticker. One written-out statement
answers both, and `sessions.timers.schedules.fire_due` reads the rows
through the ORM only when it says something is due.
"""
from __future__ import annotations

from datetime import datetime

from django.db import connection

from sessions.models import Reminder, Schedule
from sessions.sql import written_out


def _due_orm(now: datetime) -> tuple[bool, bool]:
    return (Schedule.objects.filter(active=True, next_fire_at__lte=now).exists(),
            Reminder.objects.filter(status=Reminder.Status.ARMED, next_fire_at__lte=now).exists())


@written_out(orm=_due_orm)
def due(now: datetime) -> tuple[bool, bool]:
    """(an active schedule is due, an armed reminder is due) at `now`."""
    at = Schedule._meta.get_field("next_fire_at").get_db_prep_value(now, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS(SELECT 1 FROM {Schedule._meta.db_table} WHERE active AND next_fire_at <= %s), "
            f"EXISTS(SELECT 1 FROM {Reminder._meta.db_table} WHERE status = %s AND next_fire_at <= %s)",
            [at, Reminder.Status.ARMED.value, at])
        schedules, reminders = cursor.fetchone()
    return bool(schedules), bool(reminders)
