"""The event log: the one door through which events are written, and reads.

`append_events` allocates indexes by bumping the session's counter with
UPDATE ... RETURNING in the same transaction as the insert (on PostgreSQL in
the same statement), so indexes stay contiguous across processes on SQLite
(IMMEDIATE transactions serialize writers) and PostgreSQL (the row lock
serializes them). Wake-ups go out only
after commit, so a reader never looks for a row that is not there yet.
"""
from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from agents.channels import ChannelHook
from agents.hooks import Hook
from sessions import wakeups
from sessions.channel_delivery import hand_to_channels
from sessions.models import Event, EventType, Session

log = logging.getLogger(__name__)

TERMINAL_TYPES = frozenset({EventType.SESSION_WAITING, EventType.SESSION_COMPLETED, EventType.SESSION_FAILED})


class SessionGone(Exception):
    """The session was deleted while something was still writing to it."""


def append_events(
    session_id: str, items: Iterable[tuple[str, dict[str, Any]]], turn_id: str = "", hooks: Sequence[Hook] = ()
) -> list[Event]:
    """Store events with the next indexes; after commit, wake readers and call the agent's hooks."""
    items = list(items)
    if not items:
        return []
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql" and len(items) <= ONE_STATEMENT_MAX:
            first = _allocate_and_insert(session_id, items, turn_id, now)
        else:
            first = _allocate(session_id, len(items))
        events = [
            Event(session_id=session_id, index=first + i, turn_id=turn_id, type=str(type_), data=data, at=now)
            for i, (type_, data) in enumerate(items)
        ]
        if connection.vendor != "postgresql" or len(items) > ONE_STATEMENT_MAX:
            _insert(events)
        last = events[-1].index
        wakeups.announce(session_id, last)
        if hooks:
            transaction.on_commit(lambda: run_hooks(hooks, events))
    return events


def run_hooks(hooks: Sequence[Hook], events: list[Event]) -> None:
    """Observe-only: a failing hook is logged and never breaks the turn.

    A channel's events map is handed the batch as a whole, as a task (see sessions.channel_delivery).
    """
    channel_hooks = [h for h in hooks if isinstance(h, ChannelHook)]
    if channel_hooks:
        hand_to_channels(channel_hooks, events[0].session_id, [e.type for e in events])
    for event in events:
        envelope = None
        for hook in hooks:
            if isinstance(hook, ChannelHook) or not hook.wants(event.type):
                continue
            envelope = envelope or event.envelope()
            try:
                hook.function(dict(envelope))
            except Exception:
                log.exception("hook %s failed on %s", getattr(hook.function, "__name__", hook), event.type)


# Above this many events an append takes two statements (parameters stay well under PostgreSQL's limit).
ONE_STATEMENT_MAX = 500
_COLUMNS = ("session", "index", "turn_id", "type", "data", "at")


def _allocate(session_id: str, count: int) -> int:
    """Bump the session's counter by `count`; the first index allocated."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Session._meta.db_table} SET next_event_index = next_event_index + %s WHERE id = %s"
            " RETURNING next_event_index",
            [count, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise SessionGone(session_id)
    return row[0] - count


def _allocate_and_insert(session_id: str, items: list[tuple[str, dict[str, Any]]], turn_id: str, now) -> int:
    """PostgreSQL: the counter bump and the insert in one statement (a data-modifying CTE).

    The UPDATE takes the session row's lock exactly as the two-statement form
    does; an append is one round trip instead of two.
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
    sql = (
        f"WITH bumped AS (UPDATE {Session._meta.db_table} SET next_event_index = next_event_index + %s"
        f" WHERE id = %s RETURNING next_event_index) "
        f"INSERT INTO {Event._meta.db_table} ({columns}) "
        f"SELECT %s, bumped.next_event_index - {len(items)} + v.i, %s, v.t, v.d, %s "
        f"FROM bumped, (VALUES {values}) AS v(i, t, d) ORDER BY v.i RETURNING {quote(fields['index'].column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        indexes = [row[0] for row in cursor.fetchall()]
    if not indexes:
        raise SessionGone(session_id)
    return min(indexes)


def _insert(events: list[Event]) -> None:
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


def append_event(session_id: str, type_: EventType, data: dict[str, Any], turn_id: str = "", hooks: Sequence[Hook] = ()) -> Event:
    return append_events(session_id, [(type_, data)], turn_id, hooks)[0]


@dataclass(frozen=True, slots=True)
class Line:
    """One event as readers send it: its envelope already serialized as JSON."""
    index: int
    type: str
    json: str


def read_lines(session_id: str, start_index: int = 0, limit: int | None = None) -> list[Line]:
    """The session's events from `start_index` on, serialized, in order.

    The envelope is the same as `Event.envelope()`, but `data` is spliced in
    as the text the database holds and `at` as the database writes it: a
    replay never decodes and re-encodes a payload nor parses an instant. The
    statement is written out (readers run it after every wake-up; building
    it with the ORM cost more than running it).
    """
    with connection.cursor() as cursor:
        cursor.execute(_lines_sql(), [session_id, start_index, limit if limit is not None else -1])
        rows = cursor.fetchall()
    session = json.dumps(session_id)
    return [
        Line(index, type_, f'{{"type":{_quoted(type_)},"index":{index},"sessionId":{session},'
                           f'"turnId":{json.dumps(turn_id) if turn_id else "null"},"at":"{_iso_z(at)}",'
                           f'"data":{text}}}')
        for index, type_, turn_id, at, text in rows
    ]


@functools.lru_cache(maxsize=4)
def _lines_sql_for(vendor: str) -> str:
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


def _lines_sql() -> str:
    return _lines_sql_for(connection.vendor)


@functools.lru_cache(maxsize=256)
def _quoted(value: str) -> str:
    return json.dumps(value)


def _iso_z(text: str) -> str:
    """The database's UTC text as sessions.instants.iso_z writes it (no fraction when it is zero)."""
    text = text.replace(" ", "T", 1)
    return f"{text[:-7] if text.endswith('.000000') else text}Z"


def read_events(session_id: str, start_index: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """Envelopes of the session's events from `start_index` on, in order."""
    rows = Event.objects.filter(session_id=session_id, index__gte=start_index).order_by("index")
    if limit is not None:
        rows = rows[:limit]
    return [e.envelope() for e in rows]
