"""The cases of tests/sessions/test_sql_twins.py, run in a child process on one database.

`python -c "...main()" <agent folder>` migrates, writes the base rows, then
for every case runs the written-out statement and its ORM twin (sessions.sql)
each in a transaction that is rolled back, from the same base rows, and prints
per case what each returned and the rows of the tables they touch afterwards,
read straight from the tables (as stored: text, not model values).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as tz
from typing import Any, Callable
from unittest import mock

from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection, connections, transaction
from django_q.models import OrmQ

from agents.discovery import deploy_agent_folder
from decimal import Decimal

from sessions.models import Event, EventType, Host, Reminder, Schedule, Session, Spend, Turn
# Each module registers its statements as it is imported.
from sessions.sql import STATEMENTS, access, events, feeds, queue, recovery, rows, timers, turns  # noqa: F401

AT = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=tz.utc)
EARLIER = datetime(2026, 3, 4, 5, 0, 0, tzinfo=tz.utc)
TRICKY = [
    {"text": "héllo — 日本語 \U0001F600", "quote": 'a "b" \\ c', "newline": "x\ny\tz"},
    {"nested": {"list": [1, 2.5, None, True, {"deep": []}]}, "empty": {}},
    {"delta": ""},
    {"big": 12345678901234567, "neg": -1, "float": 1e-7},
]
TABLES = (Session, Turn, Event, OrmQ, Spend)


@dataclass(frozen=True)
class Case:
    statement: str  # its key in sessions.sql.STATEMENTS
    name: str
    args: Callable[[], tuple]  # built afresh for each run: instances are changed by inserting them
    changes: bool  # whether it writes rows (a case that changes nothing proves little on its own)

    @property
    def id(self) -> str:
        return f"{self.statement}:{self.name}"


def _session(id_: str, **fields: Any) -> Session:
    deployment = _base["deployment"]
    return Session(id=id_, agent_id=deployment.agent_id, deployment=deployment, principal_id="alice",
                   authenticator="bearer", created_at=EARLIER, **fields)


def _turn(id_: str, session_id: str = "ses_a", **fields: Any) -> Turn:
    return Turn(id=id_, session_id=session_id, created_at=EARLIER, **fields)


_base: dict[str, Any] = {}


def base_rows(folder: str) -> None:
    _base["deployment"] = deploy_agent_folder(folder)
    Session.objects.bulk_create([
        _session("ses_a", status="running", next_event_index=len(TRICKY) + 1, options={"dryRun": True},
                 conversation=[{"role": "user", "content": "it's \"quoted\""}], usage={"input": 3}),
        _session("ses_b", mode="task"),
        # Its active turn is queued (due another task once its creation is stale); its delivery's lease ends at AT.
        _session("ses_c", status="running", channel_lease_until=AT),
    ])
    Turn.objects.bulk_create([
        _turn("turn_q"),
        _turn("turn_resumed", started_at=EARLIER),
        _turn("turn_run", status="running", claimed_by="host:1", started_at=EARLIER, lease_until=AT,
              state={"step": 2}, usage={"input": 1}),
        _turn("turn_stopping", status="running", claimed_by="host:1", started_at=EARLIER, interrupt_requested=True),
        _turn("turn_q_stopping", session_id="ses_b", interrupt_requested=True),
        _turn("turn_c", session_id="ses_c"),
    ])
    Session.objects.filter(pk="ses_a").update(active_turn="turn_run")
    Session.objects.filter(pk="ses_c").update(active_turn="turn_c")
    # The host holding the running turns: its lease ends at AT.
    Host.objects.create(host_id="host", kind=Host.Kind.WORKER, started_at=EARLIER, last_seen=EARLIER, lease_until=AT)
    at = [datetime(2026, 1, 2, 3, 4, 5, tzinfo=tz.utc), datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=tz.utc), AT, AT]
    Event.objects.bulk_create(
        [Event(session_id="ses_a", index=i, turn_id="turn_run", type=EventType.MESSAGE_APPENDED, data=data, at=at[i])
         for i, data in enumerate(TRICKY)]
        + [Event(session_id="ses_a", index=len(TRICKY), turn_id="", type=EventType.SESSION_WAITING, data={}, at=AT)])
    OrmQ.objects.bulk_create([
        OrmQ(key="agentsite", payload="ready one", lock=EARLIER),
        OrmQ(key="agentsite", payload="ready two", lock=EARLIER),
        OrmQ(key="agentsite", payload="taken", lock=AT + timedelta(minutes=5)),
        OrmQ(key="elsewhere", payload="theirs", lock=EARLIER),
    ])
    _base["tasks"] = dict(OrmQ.objects.values_list("payload", "id"))
    agent_id = _base["deployment"].agent_id
    Schedule.objects.bulk_create([
        Schedule(agent_id=agent_id, schedule_id="due", kind="markdown", cron="* * * * *", next_fire_at=AT),
        Schedule(agent_id=agent_id, schedule_id="off", kind="markdown", cron="* * * * *", next_fire_at=EARLIER,
                 active=False),
    ])
    Spend.objects.create(**_spent_today(agent_id), cost_usd=Decimal("0.125"), input_tokens=10, unpriced_calls=1)
    Reminder.objects.bulk_create([
        Reminder(agent_id=agent_id, kind="delay", spec="2h", next_fire_at=AT + timedelta(hours=2)),
        Reminder(agent_id=agent_id, kind="delay", spec="1m", next_fire_at=EARLIER, status=Reminder.Status.DONE),
        # A run-form reminder (its handler held by a process), due long after every case's `now`.
        Reminder(agent_id=agent_id, kind="delay", spec="1d", next_fire_at=AT + timedelta(days=1),
                 handler_owner="host:1"),
    ])


def _db():
    return connections["default"]


def _spent_today(agent_id: int, model: str = "openai:gpt-4o") -> dict[str, Any]:
    return {"day": AT.date(), "principal_id": "alice", "authenticator": "bearer", "agent_id": agent_id, "model": model}


SPENT = {"cost_usd": Decimal("0.0000123456"), "input_tokens": 1200, "output_tokens": 34, "cache_read_tokens": 5}


SETTLE = {"active_turn": None, "status": "waiting", "conversation": [{"role": "assistant", "content": "ok \"x\" é"}],
          "usage": {"input": 5, "output": None}}
CLAIM = {"status": "running", "claimed_by": "host:2", "lease_until": AT + timedelta(seconds=30)}
END = {"status": "completed", "error": "", "usage": None, "ended_at": AT, "lease_until": None, "state": {}}

CASES = [
    Case("rows.update_where", "release_lock", lambda: (Session, {"id": "ses_a", "active_turn": "turn_run"}, SETTLE),
         True),
    Case("rows.update_where", "release_lock_lost", lambda: (Session, {"id": "ses_a", "active_turn": "turn_q"}, SETTLE),
         False),
    Case("rows.update_where", "take_lock_is_null", lambda: (Session, {"id": "ses_b", "active_turn": None},
                                                             {"active_turn": "turn_q", "status": "running"}), True),
    Case("rows.update_where", "claim", lambda: (Turn, {"id": "turn_q", "status": "queued"}, CLAIM,
                                                {"started_at": AT}), True),
    Case("rows.update_where", "claim_resumed_keeps_its_start",
         lambda: (Turn, {"id": "turn_resumed", "status": "queued"}, CLAIM, {"started_at": AT}), True),
    Case("rows.update_where", "claim_lost", lambda: (Turn, {"id": "turn_run", "status": "queued"}, CLAIM,
                                                     {"started_at": AT}), False),
    Case("rows.update_where", "end", lambda: (Turn, {"id": "turn_run", "status": "running", "claimed_by": "host:1"},
                                              END), True),
    Case("rows.insert_row", "session",
         lambda: (_session("ses_new", status="running", active_turn_id="turn_q", options={"asOf": "2026-01-01"},
                           channel_state={"ts": "1.2"}, title="é \"t\""),), True),
    Case("rows.insert_row", "turn",
         lambda: (_turn("turn_new", message="hi \"there\"", workspace_files=[{"path": "a.txt", "content": "x"}]),),
         True),
    Case("events.allocate", "session", lambda: ("ses_a", 3), True),
    Case("events.allocate", "gone", lambda: ("ses_missing", 1), False),
    Case("events.allocate", "with_a_running_turns_flag", lambda: ("ses_a", 2, "turn_run"), True),
    Case("events.allocate", "with_a_stopping_turns_flag", lambda: ("ses_a", 1, "turn_stopping"), True),
    Case("events.allocate", "with_a_gone_turns_flag", lambda: ("ses_a", 1, "turn_missing"), True),
    Case("events.allocate", "gone_with_a_flag", lambda: ("ses_missing", 1, "turn_run"), False),
    Case("events.allocate_and_insert", "batch",
         lambda: ("ses_a", [(EventType.MESSAGE_APPENDED, d) for d in TRICKY], "turn_run", AT), True),
    Case("events.allocate_and_insert", "gone", lambda: ("ses_missing", [("test.x", {})], "", AT), False),
    Case("events.allocate_and_insert", "with_a_running_turns_flag",
         lambda: ("ses_a", [(EventType.MESSAGE_APPENDED, {"delta": "x"})], "turn_run", AT, "turn_run"), True),
    Case("events.allocate_and_insert", "with_a_stopping_turns_flag",
         lambda: ("ses_a", [(EventType.MESSAGE_APPENDED, {"delta": "x"})], "turn_stopping", AT, "turn_stopping"), True),
    Case("events.allocate_and_insert", "with_a_gone_turns_flag",
         lambda: ("ses_a", [(EventType.MESSAGE_APPENDED, {"delta": "x"})], "", AT, "turn_missing"), True),
    Case("events.insert_events", "batch",
         lambda: ([Event(session_id="ses_b", index=i, turn_id="turn_q" if i else "", type=EventType.MESSAGE_APPENDED,
                         data=d, at=AT) for i, d in enumerate(TRICKY)],), True),
    Case("events.event_lines", "all", lambda: ("ses_a",), False),
    Case("events.event_lines", "from_2_limit_2", lambda: ("ses_a", 2, 2), False),
    Case("events.event_lines", "none", lambda: ("ses_b",), False),
    Case("feeds.feed_lines", "several", lambda: ([("ses_a", 1), ("ses_b", 0), ("ses_missing", 0)], 100), False),
    Case("feeds.feed_lines", "limited", lambda: ([("ses_a", 0), ("ses_b", 2)], 2), False),
    Case("feeds.feed_lines", "none", lambda: ([], 10), False),
    Case("turns.read_turn", "running", lambda: ("turn_run",), False),
    Case("turns.read_turn", "missing", lambda: ("turn_missing",), False),
    Case("turns.read_session", "with_conversation", lambda: ("ses_a",), False),
    Case("turns.read_session", "missing", lambda: ("ses_missing",), False),
    Case("access.agent_version", "deployed", lambda: ("support",), False),
    Case("access.agent_version", "missing", lambda: ("nobody",), False),
    Case("access.owner_and_mode", "its_agents", lambda: ("ses_b", "support"), False),
    Case("access.owner_and_mode", "another_agents", lambda: ("ses_b", "nobody"), False),
    Case("access.owner_and_mode", "missing", lambda: ("ses_missing", "support"), False),
    Case("turns.session_head", "oldest_queued", lambda: ("ses_a",), False),
    Case("turns.session_head", "asked_to_stop", lambda: ("ses_b",), False),
    Case("turns.session_head", "none_queued", lambda: ("ses_missing",), False),
    Case("turns.interrupted", "running", lambda: ("turn_run",), False),
    Case("turns.interrupted", "asked_to_stop", lambda: ("turn_stopping",), False),
    Case("turns.interrupted", "gone", lambda: ("turn_missing",), False),
    Case("timers.due", "nothing_due", lambda: (EARLIER,), False),
    Case("timers.due", "a_schedule_due", lambda: (AT,), False),
    Case("timers.due", "both_due", lambda: (AT + timedelta(hours=3),), False),
    Case("recovery.due", "nothing_due", lambda: (EARLIER, "other", EARLIER - timedelta(hours=1)), False),
    Case("recovery.due", "held_here", lambda: (EARLIER, "host", EARLIER), False),
    Case("recovery.due", "lapsed_and_lost", lambda: (AT + timedelta(hours=1), "other", AT), False),
    Case("rows.add_or_insert", "to_the_days_row",
         lambda: (Spend, _spent_today(_base["deployment"].agent_id), SPENT), True),
    Case("rows.add_or_insert", "a_new_row",
         lambda: (Spend, _spent_today(_base["deployment"].agent_id, "anthropic:claude-sonnet-4-5"),
                  {**SPENT, "unpriced_calls": 2}), True),
    Case("queue.enqueue", "task", lambda: (_db(), "agentsite", "a payload \"é\"", AT), True),
    Case("queue.ready", "mine", lambda: (_db(), "agentsite", AT, 10), False),
    Case("queue.ready", "limited", lambda: (_db(), "agentsite", AT, 1), False),
    Case("queue.claim", "ready", lambda: (_db(), _base["tasks"]["ready one"], AT + timedelta(seconds=60), AT), True),
    Case("queue.claim", "taken", lambda: (_db(), _base["tasks"]["taken"], AT + timedelta(seconds=60), AT), False),
    Case("queue.delete", "task", lambda: (_db(), _base["tasks"]["ready two"]), True),
]


def table_rows() -> dict[str, list]:
    """Every row of the tables the statements touch, each value as the database's own text of it."""
    out, quote = {}, connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in TABLES:
            columns = ", ".join(f"CAST({quote(f.column)} AS text)" for f in model._meta.concrete_fields)
            cursor.execute(f"SELECT {columns} FROM {quote(model._meta.db_table)} ORDER BY {quote(model._meta.pk.column)}")
            out[model._meta.db_table] = [list(row) for row in cursor.fetchall()]
    return out


def _run(function: Callable, case: Case, comparable: Callable | None) -> dict[str, Any]:
    with mock.patch("django.utils.timezone.now", return_value=AT):  # auto_now fields
        with transaction.atomic():
            result = function(*case.args())
            if comparable is not None:
                result = comparable(result)
            after = table_rows()
            transaction.set_rollback(True)
    # PostgreSQL's sequences do not roll back: start the next run from the same ids.
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), list(TABLES)):
            cursor.execute(sql)
    return {"result": json.loads(json.dumps(result, default=repr)), "rows": after}


def main() -> None:
    call_command("migrate", verbosity=0)
    base_rows(sys.argv[1])
    before = table_rows()
    out: dict[str, Any] = {"base": before, "cases": {}}
    for case in CASES:
        twin = STATEMENTS[case.statement]
        if connection.vendor not in twin.vendors:
            out["cases"][case.id] = None
            continue
        written, orm = _run(twin.written, case, twin.comparable), _run(twin.orm, case, twin.comparable)
        out["cases"][case.id] = {"written": written, "orm": orm}
    print(json.dumps(out))
