"""Every SQL statement written out by hand, each beside the ORM expression it replaces.

Only the hot paths of a turn earn one (an event append and read, a turn's
claim, load, stop flag and end, a session's insert and settle, the task queue,
the two reads that admit a request to a session, the ticker's questions
whether a timer is due and whether the recovery sweep has work, the spending a turn's settle adds to the ledger): there
the ORM's building of a query cost more CPU than the database spent running
it. Each value still goes through its field's own adaptation, so what is
stored is what the ORM would store.

Each written-out function is registered with `@written_out(orm=twin)`: the
twin takes the same arguments and does the same thing through the ORM, and
tests/sessions/test_sql_twins.py runs both on SQLite and on PostgreSQL and
compares the rows they leave and what they return. A statement added here
without a twin, or a twin without a case in that test, fails it.

The modules: `rows` (generic conditional UPDATE and INSERT, and add-or-insert, used by the
models' transitions; it imports no model, since the models import it),
`events` (the event log's counter, inserts and reads), `feeds` (the shared
feeds' read of many followed sessions at once), `turns` (a worker's
reads of its turn and session, of its stop flag and of the session's next queued turn), `queue` (the ORM broker's task queue),
`access` (an agent's current release row, a session's owner: what every request reads),
`timers` (whether any schedule or reminder is due: the ticker's question every second),
`recovery` (which parts of the recovery sweep have work: its question every second).
`instances` builds model instances from such rows, as the ORM would.
`pg_notify` stays in sessions.eventlog.pgnotify: it writes no row, so it has no twin.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Twin:
    written: Callable[..., Any]
    orm: Callable[..., Any]
    # Maps a return value to what is compared (e.g. a model instance to its field values).
    comparable: Callable[[Any], Any] | None = None
    # The vendors the written-out form runs on (its caller picks it only there).
    vendors: tuple[str, ...] = ("sqlite", "postgresql")


# "module.function" -> its twin; filled as the modules of this package are imported.
STATEMENTS: dict[str, Twin] = {}


def written_out(*, orm: Callable[..., Any], comparable: Callable[[Any], Any] | None = None,
                vendors: tuple[str, ...] = ("sqlite", "postgresql")) -> Callable[[F], F]:
    """Register the decorated written-out statement with its ORM twin."""
    def register(function: F) -> F:
        STATEMENTS[f"{function.__module__.rsplit('.', 1)[-1]}.{function.__name__}"] = Twin(
            function, orm, comparable, vendors)
        return function
    return register
