"""Timers across real processes: exactly-once firing with two tickers, and restarts.

1. Two OS processes tick the same simulated minutes (`fire_due(now=t)` for ten
   minute boundaries, released together at each one) against one migrated
   database, SQLite file and PostgreSQL, each running the turns it starts. A
   markdown schedule, a handler schedule and an every-1m reminder are each due
   every minute: each boundary must be fired exactly once in total.
2. A real `manage.py serve` fires a due reminder by itself; stopped and
   started again with --dev on the same state root, a prompt-form reminder
   is still armed (checked in the database between the two) and fires through
   the dev route; a run-form reminder (its handler lived in a worker that is
   gone) is disarmed with `handler_lost_on_restart` by the new workers' tickers.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.sessions.test_reminders import WATCH_TOOL
from tests.sessions.test_schedules import handler_schedule, markdown_schedule, write_agent
from tests.support import ROOT, child_env, postgres_database, premigrate, read_stream_until, run_server

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
MINUTES = 10
TICKERS = 2

SETUP = """
import json
import django
django.setup()
from datetime import datetime, timedelta
from agents.discovery import deploy_agent_folder
from sessions.models import Schedule, Session
from sessions.timers.schedules import create_reminder

t0 = datetime.fromisoformat(sys.argv[2])
agent = deploy_agent_folder(sys.argv[1]).agent
assert Schedule.objects.filter(agent=agent).update(next_fire_at=t0) == 2
session = Session.objects.create(agent=agent, deployment=agent.active_deployment, principal_id="tester", authenticator="test")
reminder = create_reminder(session, every="1m", prompt="tick", now=t0 - timedelta(minutes=1))
assert reminder.next_fire_at == t0
print(json.dumps({"agent": agent.slug, "session": session.id, "reminder": reminder.id}))
"""

TICKER = """
import json, os, time
from datetime import datetime, timedelta
import django
django.setup()
from django.conf import settings
from django.db import connection
from sessions.timers.schedules import fire_due

settings.AGENTSITE_INLINE_TURNS = True  # no qcluster here: the firing process runs the turns it starts

me, tickers, minutes, t0, gates = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), datetime.fromisoformat(sys.argv[4]), sys.argv[5]
connection.ensure_connection()
claimed = []
for minute in range(minutes):
    # A barrier per boundary: every ticker reaches minute m before any fires it.
    open(os.path.join(gates, f"{minute}-{me}"), "w").close()
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(gates, f"{minute}-{w}")) for w in range(tickers)):
        if time.monotonic() > deadline:
            raise SystemExit(f"ticker {me}: the others never reached minute {minute}")
        time.sleep(0.001)
    # Each ticker sees the boundary a little late, as a real ticker would.
    claimed.append(fire_due(now=t0 + timedelta(minutes=minute, milliseconds=300 + 400 * me)))
print(json.dumps(claimed))
"""

READ = """
import json
import django
django.setup()
from sessions.models import Reminder, Schedule, Session, Turn

slug, session_id, reminder_id = sys.argv[1], sys.argv[2], sys.argv[3]
schedules = {s.schedule_id: [s.fire_count, s.next_fire_at.isoformat(), s.last_error] for s in Schedule.objects.filter(agent__slug=slug)}
reminder = Reminder.objects.get(pk=reminder_id)
print(json.dumps({
    "schedules": schedules,
    "schedule_sessions": list(Session.objects.filter(agent__slug=slug, channel="schedule").values_list("mode", "status")),
    "schedule_turns": list(Turn.objects.filter(session__channel="schedule", trigger="schedule").values_list("message", flat=True)),
    "reminder": [reminder.fire_count, reminder.next_fire_at.isoformat(), reminder.status],
    "reminder_turns": list(Turn.objects.filter(session_id=session_id, trigger="reminder").values_list("source_ref", "status")),
}))
"""


def python(code: str) -> list[str]:
    return [sys.executable, "-c", "import sys\n" + code]


def run(code: str, env: dict[str, str], *args: str, timeout: float = 90) -> str:
    done = subprocess.run(python(code) + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextlib.contextmanager
def database(kind: str, state_root: Path) -> Iterator[dict[str, str]]:
    """The environment of processes sharing one migrated database: a SQLite file, or a throwaway PostgreSQL one
    (each a copy of a migrated one)."""
    env = child_env(DJANGO_SETTINGS_MODULE="agentsite.settings", AGENTSITE_STATE_ROOT=str(state_root))
    for name in ("DATABASE_URL", "REDIS_URL", "AGENTSITE_DEV", "AGENTSITE_SCHEDULES"):
        env.pop(name, None)
    state_root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if kind == "postgres":
            env["DATABASE_URL"] = stack.enter_context(postgres_database(migrated=True))
        else:
            premigrate(state_root, env)
            if not (state_root / "db.sqlite3").exists():  # no copy where the run's database is not SQLite
                migrate = subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                                         capture_output=True, text=True, timeout=120)
                assert migrate.returncode == 0, migrate.stderr
        yield env


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_ticking_processes_fire_each_minute_exactly_once(kind, tmp_path):
    fired_log = tmp_path / "fired.log"
    agent = write_agent(tmp_path / "ticks", {
        "agent/schedules/minutely.md": markdown_schedule("* * * * *", "Minutely task."),
        "agent/schedules/record.py": handler_schedule("* * * * *", f"""
            import os
            with open({str(fired_log)!r}, "a") as out:  # O_APPEND: whole lines from any process
                out.write(f"{{ctx.due.isoformat()}} {{os.getpid()}}\\n")
        """),
    })
    gates = tmp_path / "gates"
    gates.mkdir()
    with database(kind, tmp_path / "state") as env:
        made = json.loads(run(SETUP, env, str(agent), T0.isoformat()))
        tickers = [
            subprocess.Popen(python(TICKER) + [str(w), str(TICKERS), str(MINUTES), T0.isoformat(), str(gates)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for w in range(TICKERS)
        ]
        try:
            claimed = []
            for ticker in tickers:
                out, err = ticker.communicate(timeout=120)
                assert ticker.returncode == 0, err
                claimed.append(json.loads(out))
        finally:
            for ticker in tickers:
                if ticker.poll() is None:
                    ticker.kill()
                    ticker.wait()
        state = json.loads(run(READ, env, made["agent"], made["session"], made["reminder"]))

    boundaries = [T0 + timedelta(minutes=m) for m in range(MINUTES)]
    after = (T0 + timedelta(minutes=MINUTES)).isoformat()
    # Three timers are due at each boundary; between them the tickers claimed each exactly once.
    assert [sum(per[m] for per in claimed) for m in range(MINUTES)] == [3] * MINUTES, claimed
    lines = [line.split() for line in fired_log.read_text().splitlines()]
    assert sorted(due for due, _ in lines) == [b.isoformat() for b in boundaries], "each boundary handled once"
    assert state["schedules"] == {"minutely": [MINUTES, after, ""], "record": [MINUTES, after, ""]}
    assert state["schedule_sessions"] == [["task", "completed"]] * MINUTES
    assert state["schedule_turns"] == ["Minutely task."] * MINUTES
    assert state["reminder"] == [MINUTES, after, "armed"]
    assert state["reminder_turns"] == [[made["reminder"], "completed"]] * MINUTES


# --- real servers ----------------------------------------------------------------------


def reminders_in_db(state_root: Path) -> dict[str, tuple]:
    """The reminder rows, read straight from the SQLite file while no server runs."""
    with contextlib.closing(sqlite3.connect(state_root / "db.sqlite3")) as db:
        rows = db.execute("SELECT id, status, reason, fire_count, handler_owner, next_fire_at FROM agent_sessions_reminder")
        return {r[0]: r[1:] for r in rows}


def wait_for(predicate, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def start_and_settle(client: httpx.Client, message: str) -> str:
    response = client.post("/timed/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    session_id = response.json()["sessionId"]
    read_stream_until(client, f"/timed/v1/session/{session_id}/stream?startIndex=0", "session.waiting", timeout=30)
    return session_id


def test_reminders_fire_in_a_running_server_and_survive_a_restart(tmp_path):
    """The first server (no --dev) fires a due reminder by itself; the second (--dev, same state root)
    still has the prompt-form reminder armed and fires it by hand, and has disarmed the run-form one."""
    agent = write_agent(tmp_path / "timed", {"agent/tools/watch.py": WATCH_TOOL})
    state = tmp_path / "state"
    agents = ("--no-examples", "--agents", str(agent))

    with run_server(state, *agents) as first, first.client() as client:
        # The production ticker: a reminder due in a second wakes its session with nobody firing it by hand.
        quick = start_and_settle(client, "hello")
        made = client.post(f"/timed/v1/session/{quick}/reminders", json={"delay": "1s", "prompt": "On time?"})
        assert made.status_code == 201, made.text
        quick_id = made.json()["reminderId"]
        events = read_stream_until(client, f"/timed/v1/session/{quick}/stream?startIndex=0", "session.waiting",
                                   count=2, timeout=30)
        wake = next(e for e in events if e["type"] == "message.received" and e["data"]["source"] == "reminder")
        assert wake["data"] == {"source": "reminder", "text": "On time?", "reminderId": quick_id}
        assert parse_at(wake["at"]) >= parse_at(made.json()["nextFireAt"]), "never before its due time"

        # A run-form reminder made by a tool in a worker, and a prompt-form one due long after the restart.
        session_id = start_and_settle(client, '/call watch {"every": "1h"}')
        made = client.post(f"/timed/v1/session/{session_id}/reminders",
                           json={"delay": "1h", "prompt": "Wake after the restart."})
        assert made.status_code == 201, made.text
        prompt_id = made.json()["reminderId"]
        listed = client.get(f"/timed/v1/session/{session_id}/reminders").json()["reminders"]
        [run_form] = [r for r in listed if r["form"] == "run"]
        assert run_form["status"] == "armed"
        events_before = len(client.get(f"/timed/v1/session/{session_id}/events").text.splitlines())

    rows = reminders_in_db(state)  # no server runs now
    assert rows[quick_id][:3] == ("done", "fired", 1)
    assert rows[prompt_id][:3] == ("armed", "", 0)
    assert rows[run_form["reminderId"]][:3] == ("armed", "", 0)
    assert rows[run_form["reminderId"]][3], "a run-form reminder records the process holding its handler"

    with run_server(state, "--dev", *agents) as second, second.client() as client:
        url = f"/timed/v1/session/{session_id}/reminders"

        def disarmed():
            found = {r["reminderId"]: r for r in client.get(url).json()["reminders"]}
            return found if found[run_form["reminderId"]]["status"] == "disarmed" else None

        # The new workers' tickers find the handler's process gone (dev mode or not).
        found = wait_for(disarmed, what="the run-form reminder to be disarmed")
        assert found[run_form["reminderId"]]["reason"] == "handler_lost_on_restart"
        assert (found[prompt_id]["status"], found[prompt_id]["fireCount"]) == ("armed", 0)

        fired = client.post(f"/timed/v1/dev/reminders/{prompt_id}")
        assert fired.status_code == 200, fired.text
        assert (fired.json()["fireCount"], fired.json()["status"]) == (1, "done")
        events = read_stream_until(client, f"/timed/v1/session/{session_id}/stream?startIndex={events_before}",
                                   "session.waiting", timeout=30)
        wake = next(e for e in events if e["type"] == "message.received")
        assert wake["data"] == {"source": "reminder", "text": "Wake after the restart.", "reminderId": prompt_id}
        assert client.post(f"/timed/v1/dev/reminders/{prompt_id}").status_code == 409

        # A live run-form reminder's handler is in a worker's memory: the web process refuses to fire it
        # rather than disarm it.
        watched = start_and_settle(client, '/call watch {"every": "1h"}')
        [live] = client.get(f"/timed/v1/session/{watched}/reminders").json()["reminders"]
        refused = client.post(f"/timed/v1/dev/reminders/{live['reminderId']}")
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "handler_elsewhere", refused.text
        [live] = client.get(f"/timed/v1/session/{watched}/reminders").json()["reminders"]
        assert (live["status"], live["fireCount"]) == ("armed", 0)


def parse_at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
