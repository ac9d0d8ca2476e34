"""The event log: the one door through which events are written, and reads.

`append_events` allocates indexes by bumping the session's counter with
UPDATE ... RETURNING in the same transaction as the insert (on PostgreSQL in
the same statement), so indexes stay contiguous across processes on SQLite
(IMMEDIATE transactions serialize writers) and PostgreSQL (the row lock
serializes them). Wake-ups go out only
after commit, so a reader never looks for a row that is not there yet.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Sequence

from django.db import connection, transaction
from django.utils import timezone

from agents.channels import ChannelHook
from agents.hooks import Hook
from sessions.eventlog import wakeups
from sessions.eventlog.channel_delivery import hand_to_channels
from sessions.models import Event, EventType, Session
from sessions.principal import Principal
from sessions.sql import events as sql
from sessions.sql.events import Line

log = logging.getLogger(__name__)

TERMINAL_TYPES = frozenset({EventType.SESSION_WAITING, EventType.SESSION_COMPLETED, EventType.SESSION_FAILED})


class SessionGone(Exception):
    """The session was deleted while something was still writing to it."""


def append_events(
    session_id: str, items: Iterable[tuple[str, dict[str, Any]]], turn_id: str = "", hooks: Sequence[Hook] = (),
    *, stop_flag: Callable[[bool], object] | None = None,
) -> list[Event]:
    """Store events with the next indexes; after commit, wake readers and call the agent's hooks.

    `stop_flag`: told whether turn `turn_id` was asked to stop, read by the append's own statement.
    """
    items = list(items)
    if not items:
        return []
    now = timezone.now()
    stop_of = turn_id if stop_flag is not None else ""
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql" and len(items) <= ONE_STATEMENT_MAX:
            allocated = _gone_if_none(session_id, sql.allocate_and_insert(session_id, items, turn_id, now, stop_of))
        else:
            allocated = _gone_if_none(session_id, sql.allocate(session_id, len(items), stop_of))
        first = allocated.first
        if stop_flag is not None:
            stop_flag(bool(allocated.stopped))
        events = [
            Event(session_id=session_id, index=first + i, turn_id=turn_id, type=str(type_), data=data, at=now)
            for i, (type_, data) in enumerate(items)
        ]
        if connection.vendor != "postgresql" or len(items) > ONE_STATEMENT_MAX:
            sql.insert_events(events)
        last = events[-1].index
        wakeups.announce(session_id, last)
        if hooks:
            transaction.on_commit(lambda: run_hooks(hooks, events))
    return events


def run_hooks(hooks: Sequence[Hook], events: list[Event]) -> None:
    """Observe-only: a failing hook is logged and never breaks the turn.

    A channel's events map is handed the batch as a whole, as a task (see sessions.eventlog.channel_delivery).
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


def _gone_if_none(session_id: str, allocated: sql.Allocated | None) -> sql.Allocated:
    if allocated is None:
        raise SessionGone(session_id)
    return allocated


def append_event(session_id: str, type_: EventType, data: dict[str, Any], turn_id: str = "", hooks: Sequence[Hook] = ()) -> Event:
    return append_events(session_id, [(type_, data)], turn_id, hooks)[0]


def operator_acted(principal, action: str, call_id: str = "", **ids: str) -> tuple[str, dict[str, Any]]:
    """The `operator.acted` event of `principal` doing `action` ("approve", "deny", "stop",
    "cancel_reminder", "handoff") on a session that is not theirs, for the same append as the act's own events.
    `ids` name what was acted on beyond the session (`turnId`, `reminderId`)."""
    data: dict[str, Any] = {"operator": principal.principal_id, "action": action}
    if call_id:
        data["callId"] = call_id
    data.update({key: value for key, value in ids.items() if value})
    return EventType.OPERATOR_ACTED, data


# What each operator act reads as, after the operator's name (the playground says the same).
ACTS = {"approve": "approved call {callId}", "deny": "denied call {callId}", "answer": "answered question {callId}",
        "stop": "stopped the session", "cancel_reminder": "cancelled reminder {reminderId}"}


def describe_act(data: dict[str, Any]) -> str:
    """An `operator.acted` event's data as a sentence: "olga stopped turn trn_1", "sam approved call call_1"."""
    action = data.get("action", "")
    if action == "stop" and data.get("turnId"):
        did = f"stopped turn {data['turnId']}"
    else:
        did = ACTS.get(action, action).format_map({"callId": "", "reminderId": "", **data})
    return f"{data.get('operator', 'an operator')} {did}".strip()


def act_on(session: Session, by: Principal | None, action: str, act: Callable[[], bool], *,
           lock_first: Callable[[], None] | None = None, **ids: str) -> bool:
    """Do `act` (a transition that returns whether it happened) on `session` for `by`; an operator
    acting on someone else's session is recorded as `operator.acted`, only when the act happened.

    The one door for operators' acts that write no event of their own (stops, a reminder
    cancelled), whichever surface asks: the API, the websocket, the admin. `lock_first`
    takes a lock the act takes too and that comes before the session row in the lock order.
    """
    if by is None or not by.oversees(session):
        return act()
    hooks = session.hooks()  # loaded before the write lock is taken
    with transaction.atomic():
        if lock_first is not None:
            lock_first()
        # The record first: the session row before the turns or the reminder, lifecycle's lock
        # order. It is undone when the act found nothing to do, so the log names only acts that happened.
        append_events(session.id, [operator_acted(by, action, **ids)], hooks=hooks)
        if not act():
            transaction.set_rollback(True)
            return False
    return True


def read_lines(session_id: str, start_index: int = 0, limit: int | None = None) -> list[Line]:
    """The session's events from `start_index` on, serialized, in order (see sessions.sql.events.event_lines)."""
    return sql.event_lines(session_id, start_index, limit)


def read_events(session_id: str, start_index: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """Envelopes of the session's events from `start_index` on, in order."""
    rows = Event.objects.filter(session_id=session_id, index__gte=start_index).order_by("index")
    if limit is not None:
        rows = rows[:limit]
    return [e.envelope() for e in rows]
