"""What a manifest says about a database, read in the snapshot a backup copies.

Plain SQL over any DB-API cursor (sqlite3's on a copy, psycopg's inside pg_dump's exported snapshot,
Django's after a restore), so the counts are those of the rows in the archive, not of a moment later.
"""
from __future__ import annotations

from typing import Any

from agents.models import Deployment, Secret
from sessions.models import Event, Session, Turn


def _table(model) -> str:
    return model._meta.db_table


def counts(cursor) -> dict[str, int]:
    """Sessions, events, releases (scratch copies aside), turns, and secrets."""
    found = {}
    for name, sql in (
        ("sessions", f"SELECT COUNT(*) FROM {_table(Session)}"),
        ("events", f"SELECT COUNT(*) FROM {_table(Event)}"),
        ("releases", f"SELECT COUNT(*) FROM {_table(Deployment)} WHERE NOT scratch"),
        ("turns", f"SELECT COUNT(*) FROM {_table(Turn)}"),
        ("runningTurns", f"SELECT COUNT(*) FROM {_table(Turn)} WHERE status = '{Turn.Status.RUNNING.value}'"),
        ("secrets", f"SELECT COUNT(*) FROM {_table(Secret)}"),
    ):
        cursor.execute(sql)
        found[name] = int(cursor.fetchone()[0])
    return found


def migrations(cursor) -> dict[str, list[str]]:
    """The migrations applied, by app, in the order they were."""
    cursor.execute("SELECT app, name FROM django_migrations ORDER BY id")
    applied: dict[str, list[str]] = {}
    for app, name in cursor.fetchall():
        applied.setdefault(app, []).append(name)
    return applied


def broken_event_logs(cursor, limit: int = 5) -> list[str]:
    """Sessions whose events are not exactly 0..next_event_index-1 (at most `limit` of them)."""
    session, event = _table(Session), _table(Event)
    cursor.execute(
        f'SELECT s.id FROM {session} s LEFT JOIN (SELECT session_id, COUNT(*) AS n, MIN("index") AS lo, '
        f'MAX("index") AS hi FROM {event} GROUP BY session_id) e ON e.session_id = s.id '
        f"WHERE COALESCE(e.n, 0) <> s.next_event_index OR (e.n > 0 AND (e.lo <> 0 OR e.hi <> e.n - 1)) "
        f"ORDER BY s.id LIMIT {int(limit)}")
    return [row[0] for row in cursor.fetchall()]


def describe(cursor) -> dict[str, Any]:
    return {"counts": counts(cursor), "migrations": migrations(cursor)}
