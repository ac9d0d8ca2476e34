"""The event log's statements: the session's index counter, event inserts, and the readers' read.

Every turn appends several batches and every reader re-reads after each
wake-up: building these with the ORM cost more than running them.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import F

from sessions.models import Event, Session, Turn
from sessions.sql import written_out

_COLUMNS = ("session", "index", "turn_id", "type", "data", "at")


class Allocated(NamedTuple):
    first: int  # the first index allocated
    # Whether turn `stop_of` was asked to stop (a turn gone counts as asked), read by the same
    # statement: a streaming turn's appends answer its stop flag, which it would otherwise poll. None: not asked.
    stopped: bool | None


def _stopped_orm(stop_of: str) -> bool | None:
    return Turn.asked_to_stop(stop_of) if stop_of else None


def _allocate_orm(session_id: str, count: int, stop_of: str = "") -> Allocated | None:
    if not Session._base_manager.filter(pk=session_id).update(next_event_index=F("next_event_index") + count):
        return None
    last = Session._base_manager.filter(pk=session_id).values_list("next_event_index", flat=True).get()
    return Allocated(last - count, _stopped_orm(stop_of))


def _stop_flag(stop_of: str) -> tuple[str, list[Any]]:
    """The select expression (and its parameters) of turn `stop_of`'s stop flag; NULL when not asked."""
    if not stop_of:
        return "NULL", []
    return f"COALESCE((SELECT interrupt_requested FROM {Turn._meta.db_table} WHERE id = %s), TRUE)", [stop_of]


def _allocated(first: int | None, stopped: Any) -> Allocated | None:
    return None if first is None else Allocated(first, None if stopped is None else bool(stopped))


@written_out(orm=_allocate_orm)
def allocate(session_id: str, count: int, stop_of: str = "") -> Allocated | None:
    """Bump the session's counter by `count` (None: no such session); with `stop_of`, read that turn's stop flag too."""
    flag, flag_params = _stop_flag(stop_of)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Session._meta.db_table} SET next_event_index = next_event_index + %s WHERE id = %s"
            f" RETURNING next_event_index, {flag}",
            [count, session_id, *flag_params],
        )
        row = cursor.fetchone()
    return None if row is None else _allocated(row[0] - count, row[1])


def _allocate_and_insert_orm(session_id: str, items: list[tuple[str, dict[str, Any]]], turn_id: str,
                             now: datetime, stop_of: str = "") -> Allocated | None:
    allocated = _allocate_orm(session_id, len(items), stop_of)
    if allocated is not None:
        Event.objects.bulk_create([Event(session_id=session_id, index=allocated.first + i, turn_id=turn_id,
                                         type=str(type_), data=data, at=now) for i, (type_, data) in enumerate(items)])
    return allocated


@written_out(orm=_allocate_and_insert_orm, vendors=("postgresql",))
def allocate_and_insert(session_id: str, items: list[tuple[str, dict[str, Any]]], turn_id: str,
                        now: datetime, stop_of: str = "") -> Allocated | None:
    """PostgreSQL: the counter bump and the insert in one statement (data-modifying CTEs).

    The UPDATE takes the session row's lock exactly as the two-statement form
    does; an append is one round trip instead of two. None: no such session.
    """
    fields = {name: Event._meta.get_field(name) for name in _COLUMNS}
    connection = connections[DEFAULT_DB_ALIAS]  # resolved once: each use of the proxy looks it up again
    quote = connection.ops.quote_name
    columns = ", ".join(quote(fields[name].column) for name in _COLUMNS)
    values = ", ".join(["(%s::integer, %s, %s::jsonb)"] * len(items))
    params: list[Any] = [len(items), session_id,
                         fields["session"].get_db_prep_save(session_id, connection),
                         fields["turn_id"].get_db_prep_save(turn_id, connection),
                         fields["at"].get_db_prep_save(now, connection)]
    for i, (type_, data) in enumerate(items):
        params += [i, str(type_), fields["data"].get_db_prep_save(data, connection)]
    flag, flag_params = _stop_flag(stop_of)
    index = quote(fields["index"].column)
    sql = (
        f"WITH bumped AS (UPDATE {Session._meta.db_table} SET next_event_index = next_event_index + %s"
        f" WHERE id = %s RETURNING next_event_index), "
        f"inserted AS (INSERT INTO {Event._meta.db_table} ({columns}) "
        f"SELECT %s, bumped.next_event_index - {len(items)} + v.i, %s, v.t, v.d, %s "
        f"FROM bumped, (VALUES {values}) AS v(i, t, d) ORDER BY v.i RETURNING {index}) "
        f"SELECT min({index}), {flag} FROM inserted"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params + flag_params)
        first, stopped = cursor.fetchone()
    return _allocated(first, stopped)


def _insert_events_orm(events: list[Event]) -> None:
    Event.objects.bulk_create(events)


@written_out(orm=_insert_events_orm)
def insert_events(events: list[Event]) -> None:
    """One executemany INSERT: the hot path of every turn, where bulk_create's generality costs."""
    fields = [Event._meta.get_field(name) for name in _COLUMNS]
    connection = connections[DEFAULT_DB_ALIAS]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    rows = [
        [f.get_db_prep_save(getattr(e, f.attname), connection) for f in fields]
        for e in events
    ]
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {Event._meta.db_table} ({columns}) VALUES ({placeholders})", rows)


@dataclass(frozen=True, slots=True)
class Line:
    """One event as readers send it: its envelope already serialized as JSON."""
    index: int
    type: str
    json: str


def _event_lines_orm(session_id: str, start_index: int = 0, limit: int | None = None) -> list[Line]:
    rows = Event.objects.filter(session_id=session_id, index__gte=start_index).order_by("index")
    if limit is not None:
        rows = rows[:limit]
    return [Line(e.index, e.type, json.dumps(e.envelope())) for e in rows]


def _parsed(lines: list[Line]) -> list[tuple[int, str, Any]]:
    return [(line.index, line.type, json.loads(line.json)) for line in lines]


@written_out(orm=_event_lines_orm, comparable=_parsed)
def event_lines(session_id: str, start_index: int = 0, limit: int | None = None) -> list[Line]:
    """The session's events from `start_index` on, serialized, in order.

    The envelope is the same as `Event.envelope()`, but `data` is spliced in
    as the text the database holds and `at` as the database writes it: a
    replay never decodes and re-encodes a payload nor parses an instant.
    """
    with connection.cursor() as cursor:
        cursor.execute(_lines_sql(connection.vendor), [session_id, start_index, limit if limit is not None else -1])
        rows = cursor.fetchall()
    session = json.dumps(session_id)
    return [
        Line(index, type_, f'{{"type":{_quoted(type_)},"index":{index},"sessionId":{session},'
                           f'"turnId":{json.dumps(turn_id) if turn_id else "null"},"at":"{_iso_z(at)}",'
                           f'"data":{text}}}')
        for index, type_, turn_id, at, text in rows
    ]


@functools.lru_cache(maxsize=4)
def _lines_sql(vendor: str) -> str:
    table = Event._meta.db_table
    quote = connection.ops.quote_name
    if vendor == "postgresql":
        # `at` as text in UTC: YYYY-MM-DDTHH:MM:SS.ffffff; a negative LIMIT is not allowed here: NULL is "all".
        instant, text, limit = "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')", "data::text", \
            "LIMIT NULLIF(%s, -1)"
    else:
        # SQLite holds Django's text already: YYYY-MM-DD HH:MM:SS[.ffffff], UTC; LIMIT -1 is "all".
        instant, text, limit = "CAST(at AS text)", "CAST(data AS text)", "LIMIT %s"
    return (f"SELECT {quote('index')}, {quote('type')}, turn_id, {instant}, {text} FROM {table} "
            f"WHERE session_id = %s AND {quote('index')} >= %s ORDER BY {quote('index')} {limit}")


@functools.lru_cache(maxsize=256)
def _quoted(value: str) -> str:
    return json.dumps(value)


def _iso_z(text: str) -> str:
    """The database's UTC text as sessions.instants.iso_z writes it (no fraction when it is zero)."""
    text = text.replace(" ", "T", 1)
    return f"{text[:-7] if text.endswith('.000000') else text}Z"
