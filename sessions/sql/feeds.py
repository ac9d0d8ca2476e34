"""The shared feeds' read: the new events of many sessions in one statement (sessions.eventlog.feeds).

One web process follows many sessions; when several of them are woken
together, one query reads all of them instead of one query each.
"""
from __future__ import annotations

import json
from collections import defaultdict

from django.db import connection

from sessions.sql import written_out
from sessions.sql.events import Line, _event_lines_orm, _iso_z, _lines_sql, _parsed, _quoted


def _feed_lines_orm(starts: list[tuple[str, int]], limit: int) -> dict[str, list[Line]]:
    out: dict[str, list[Line]] = {}
    for session_id, start in starts:
        lines = _event_lines_orm(session_id, start, limit)
        if lines:
            out[session_id] = lines
    return out


def _comparable(found: dict[str, list[Line]]) -> dict[str, list]:
    return {session_id: _parsed(lines) for session_id, lines in sorted(found.items())}


@written_out(orm=_feed_lines_orm, comparable=_comparable)
def feed_lines(starts: list[tuple[str, int]], limit: int) -> dict[str, list[Line]]:
    """For each (session, start): its events from `start` on, at most `limit`, serialized as
    sessions.sql.events.event_lines does; sessions with none are left out.

    One branch per session, each the single-session read (so each walks the
    (session_id, index) index from its start and stops at its LIMIT), joined
    with UNION ALL: a burst on one session cannot crowd out the others.
    """
    if not starts:
        return {}
    single = _lines_sql(connection.vendor).replace("SELECT ", "SELECT session_id, ", 1)
    sql = " UNION ALL ".join(f"SELECT * FROM ({single}) AS f{n}" for n in range(len(starts)))
    params: list = []
    for session_id, start in starts:
        params += [session_id, start, limit]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    grouped: defaultdict[str, list[Line]] = defaultdict(list)
    quoted = {session_id: json.dumps(session_id) for session_id, _ in starts}
    for session_id, index, type_, turn_id, at, text in rows:
        grouped[session_id].append(
            Line(index, type_, f'{{"type":{_quoted(type_)},"index":{index},"sessionId":{quoted[session_id]},'
                               f'"turnId":{json.dumps(turn_id) if turn_id else "null"},"at":"{_iso_z(at)}",'
                               f'"data":{text}}}'))
    for lines in grouped.values():
        lines.sort(key=lambda line: line.index)  # UNION ALL keeps no order across its branches
    return dict(grouped)
