"""A worker's reads of the turn it claimed and of its session, of the turn's stop flag, and of the
session's next queued turn.

Two plain reads: building the ORM's four-table join (turn, session,
deployment, agent) cost a worker more CPU than the database spent answering
it. The release itself comes from the process's cache (agents.discovery.release),
keyed by the hash read here with the session. The stop flag is read every
50 ms while a model streams: as an ORM query it was a tenth of a streaming
worker's CPU.
"""
from __future__ import annotations

from typing import Any

from django.db import connection, models
from django.db.models import F

from agents.models import Deployment
from sessions.models import Session, Turn
from sessions.sql import written_out
from sessions.sql.instances import columns, instance


def _fields(row: models.Model | None) -> dict[str, Any] | None:
    if row is None:
        return None
    values = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}
    if hasattr(row, "release_hash"):
        values["release_hash"] = row.release_hash
    return values


def _read_turn_orm(turn_id: str) -> Turn | None:
    return Turn.objects.filter(pk=turn_id).first()


@written_out(orm=_read_turn_orm, comparable=_fields)
def read_turn(turn_id: str) -> Turn | None:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns(Turn)} FROM {Turn._meta.db_table} WHERE id = %s", [turn_id])
        row = cursor.fetchone()
    return None if row is None else instance(Turn, connection.alias, row)


def _read_session_orm(session_id: str) -> Session | None:
    return (Session.objects.defer(None).annotate(release_hash=F("deployment__content_hash"))
            .filter(pk=session_id).first())


@written_out(orm=_read_session_orm, comparable=_fields)
def read_session(session_id: str) -> Session | None:
    """The session, its conversation included, with `release_hash`: its deployment's content hash."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns(Session, 's')}, d.content_hash FROM {Session._meta.db_table} s "
                       f"JOIN {Deployment._meta.db_table} d ON d.id = s.deployment_id WHERE s.id = %s", [session_id])
        row = cursor.fetchone()
    if row is None:
        return None
    session = instance(Session, connection.alias, row)
    session.release_hash = row[-1]
    return session


@written_out(orm=Turn.objects.session_head)
def session_head(session_id: str) -> tuple[str, bool] | None:
    """(id, interrupt requested) of the session's oldest queued turn: asked as every turn settles."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, interrupt_requested FROM {Turn._meta.db_table} WHERE session_id = %s AND status = %s"
                       " ORDER BY created_at, id LIMIT 1", [session_id, Turn.Status.QUEUED.value])
        row = cursor.fetchone()
    return None if row is None else (row[0], bool(row[1]))


@written_out(orm=Turn.asked_to_stop)
def interrupted(turn_id: str) -> bool:
    """Whether the turn was asked to stop; a turn gone with its session counts as asked."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {Turn._meta.db_table} WHERE id = %s AND NOT interrupt_requested", [turn_id])
        return cursor.fetchone() is None
