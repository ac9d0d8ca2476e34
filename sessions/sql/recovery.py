"""The recovery sweep's question each second: has any of its parts something to do?

Every pass of the sweep (sessions.turn.recovery) asked each of its parts through
the ORM: the lost hosts, the running turns to look at, the queued turns due a
task, the principals waiting for a running slot, the lapsed channel deliveries
and backup runs; six or seven queries a second, about 10 ms of a worker's CPU
a second on PostgreSQL, though almost every pass finds nothing to do. One
written-out statement answers all of them; the sweep then runs, through the
ORM, only the parts it says have work.
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from django.db import connection
from django.db.models import Q

from sessions.models import BackupRun, Host, Session, Turn
from sessions.sql import written_out


class Due(NamedTuple):
    running: bool  # a running turn whose lease lapsed, or held on this host (its process is checked by pid)
    host_lost: bool  # a running turn held on another host, while a host other than this one is lost
    queued: bool  # a session's active turn still queued, due another task
    waiting: bool  # a turn waiting for its principal's running slot
    deliveries: bool  # a custom channel's delivery whose lease lapsed
    backups: bool  # a backup run still running (its process may have died)


def _due_orm(now: datetime, here: str, stale: datetime) -> Due:
    running = Turn.objects.filter(status=Turn.Status.RUNNING)
    held_here = Q(claimed_by__startswith=f"{here}:")
    lost = Host.objects.exclude(host_id=here).lapsed(now)
    return Due(
        running.filter(Q(lease_until__lt=now) | held_here).exists(),
        running.exclude(held_here).exists() and lost.exists(),
        Session.objects.filter(Turn.due_reenqueue(now, stale, "active_turn__"),
                               active_turn__status=Turn.Status.QUEUED).exists(),
        bool(Turn.objects.waiting_owners()),
        Session.objects.filter(channel_lease_until__lt=now).exists(),
        BackupRun.objects.filter(status=BackupRun.Status.RUNNING).exists(),
    )


@written_out(orm=_due_orm, comparable=Due._asdict)
def due(now: datetime, here: str, stale: datetime) -> Due:
    """What has work at `now`, for the sweep of host `here` (queued turns created before `stale` are due a task)."""
    at = Turn._meta.get_field("lease_until").get_db_prep_value(now, connection)
    before = Turn._meta.get_field("created_at").get_db_prep_value(stale, connection)
    prefix = f"{here}:"
    turn, session = Turn._meta.db_table, Session._meta.db_table
    running, queued = Turn.Status.RUNNING.value, Turn.Status.QUEUED.value
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS(SELECT 1 FROM {turn} WHERE status = %s"
            f"  AND (lease_until < %s OR substr(claimed_by, 1, {len(prefix)}) = %s)), "
            f"EXISTS(SELECT 1 FROM {turn} WHERE status = %s AND substr(claimed_by, 1, {len(prefix)}) <> %s)"
            f"  AND EXISTS(SELECT 1 FROM {Host._meta.db_table} WHERE host_id <> %s"
            f"  GROUP BY host_id HAVING MAX(lease_until) < %s), "
            f"EXISTS(SELECT 1 FROM {session} s JOIN {turn} t ON t.id = s.active_turn_id WHERE t.status = %s"
            f"  AND ((t.lease_until IS NULL AND t.created_at < %s) OR t.lease_until < %s)), "
            f"EXISTS(SELECT 1 FROM {turn} t JOIN {session} s ON s.id = t.session_id"
            f"  WHERE (t.status = %s AND s.active_turn_id IS NULL) OR (t.status = %s AND s.status = %s)), "
            f"EXISTS(SELECT 1 FROM {session} WHERE channel_lease_until < %s), "
            f"EXISTS(SELECT 1 FROM {BackupRun._meta.db_table} WHERE status = %s)",
            [running, at, prefix,
             running, prefix, here, at,
             queued, before, at,
             queued, Turn.Status.AWAITING_APPROVAL.value, Session.Status.RUNNING.value,
             at,
             BackupRun.Status.RUNNING.value])
        return Due(*(bool(flag) for flag in cursor.fetchone()))
