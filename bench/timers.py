#!/usr/bin/env python
"""How late reminders (and, optionally, cron schedules) fire on a real server.

It starts `manage.py serve` on the embedded default (SQLite WAL, the ORM
broker, two qcluster workers whose tickers sweep every
AGENTSITE_SWEEP_SECONDS) on a fresh state root in a temp dir, deploys a small
scripted agent, and over loopback HTTP:

1. opens N chat sessions (default 20) and waits until each is idle;
2. sets one prompt-form reminder per session with `delay` (default '5s'),
   `--spacing` seconds apart (default 0.25, so the firings spread over a few
   ticks instead of landing in one);
3. waits (bounded) until every session has its `message.received` of source
   `reminder`, then reads the reminder rows.

For each reminder, on the server's clock:

  lateness   message.received `at` − the reminder's due time (`nextFireAt` at
             creation): what a user sees, tick granularity + claim + turn
             dispatch;
  claim      `lastFiredAt` − due: when the ticker claimed the firing;
  dispatch   message.received `at` − `lastFiredAt`: from the claim to the turn
             starting in a worker.

With `--schedule-firings K` it also deploys a `* * * * *` markdown schedule
and waits for K firings (up to K+1 minutes), reading the sessions it started
straight from the SQLite file (they belong to the schedule's app principal,
not to the HTTP caller): lateness = message.received `at` − the minute
boundary.

    .venv/bin/python bench/timers.py
    .venv/bin/python bench/timers.py --reminders 40 --delay 3s --sweep-seconds 0.5
    .venv/bin/python bench/timers.py --schedule-firings 2

It prints a summary and writes JSON to bench/results/timers-<timestamp>.json
(or --out). Every wait is bounded; the server is stopped at the end, on error
and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.serving import free_port, stop_server, wait_until_healthy  # noqa: E402

VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
SLUG = "timerbench"
READY_TIMEOUT = 90.0
FIRE_TIMEOUT = 120.0  # after the last due time, for every reminder to have woken its session


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "min_ms": r(min(values)) if values else None,
        "p50_ms": r(pct(values, 50)),
        "p95_ms": r(pct(values, 95)),
        "max_ms": r(max(values)) if values else None,
        "mean_ms": r(statistics.fmean(values)) if values else None,
    }


def r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000


def write_agent(root: Path, schedule: bool) -> Path:
    agent = root / SLUG / "agent"
    agent.mkdir(parents=True)
    (agent / "instructions.md").write_text("You answer briefly.\n")
    (agent / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(model='scripted:echo')\n")
    if schedule:
        (agent / "schedules").mkdir()
        (agent / "schedules" / "minutely.md").write_text('---\ncron: "* * * * *"\n---\nMinutely check.\n')
    return root / SLUG


class Server:
    def __init__(self, state_root: Path, agent: Path, env: dict[str, str]):
        self.state_root = state_root
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = state_root / "serve.log"
        state_root.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [PYTHON, str(ROOT / "manage.py"), "serve", "--port", str(self.port), "--state-root", str(state_root),
                 "--no-examples", "--agents", str(agent)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def wait_ready(self) -> None:
        wait_until_healthy(self.base_url, self.process, timeout=READY_TIMEOUT, name="serve",
                           output=lambda: self.log_path.read_text(errors="replace")[-3000:])

    def stop(self) -> None:
        stop_server(self.process, grace=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # leftovers of its group
            os.killpg(self.process.pid, signal.SIGKILL)


def wait_idle(client: httpx.Client, session_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(f"/{SLUG}/v1/session/{session_id}").json()["status"] == "waiting":
            return
        time.sleep(0.02)
    raise RuntimeError(f"session {session_id} did not become idle within {timeout}s")


def reminder_wake(client: httpx.Client, session_id: str) -> dict | None:
    lines = client.get(f"/{SLUG}/v1/session/{session_id}/events").text.splitlines()
    for line in lines:
        event = json.loads(line)
        if event["type"] == "message.received" and event["data"].get("source") == "reminder":
            return event
    return None


def measure_reminders(client: httpx.Client, count: int, delay: str, spacing: float) -> dict[str, Any]:
    sessions = []
    for i in range(count):
        response = client.post(f"/{SLUG}/v1/session", json={"message": f"session {i}"})
        response.raise_for_status()
        sessions.append(response.json()["sessionId"])
    for session_id in sessions:
        wait_idle(client, session_id)

    made: dict[str, dict] = {}
    for session_id in sessions:
        response = client.post(f"/{SLUG}/v1/session/{session_id}/reminders",
                               json={"delay": delay, "prompt": "Time to check in."})
        response.raise_for_status()
        made[session_id] = response.json()
        time.sleep(spacing)
    last_due = max(at(m["nextFireAt"]) for m in made.values())

    wakes: dict[str, dict] = {}
    deadline = time.monotonic() + max(0.0, (last_due - datetime.now(timezone.utc)).total_seconds()) + FIRE_TIMEOUT
    while len(wakes) < len(made) and time.monotonic() < deadline:
        for session_id in made:
            if session_id not in wakes and (event := reminder_wake(client, session_id)):
                wakes[session_id] = event
        time.sleep(0.2)
    missing = sorted(set(made) - set(wakes))

    rows = []
    for session_id, reminder in made.items():
        if session_id not in wakes:
            continue
        [row] = [x for x in client.get(f"/{SLUG}/v1/session/{session_id}/reminders").json()["reminders"]
                 if x["reminderId"] == reminder["reminderId"]]
        due, woke, claimed = at(reminder["nextFireAt"]), at(wakes[session_id]["at"]), at(row["lastFiredAt"])
        assert wakes[session_id]["data"]["reminderId"] == reminder["reminderId"]
        rows.append({
            "reminderId": reminder["reminderId"], "due": reminder["nextFireAt"], "claimedAt": row["lastFiredAt"],
            "receivedAt": wakes[session_id]["at"], "fireCount": row["fireCount"], "status": row["status"],
            "lateness_ms": r(ms(woke - due)), "claim_ms": r(ms(claimed - due)), "dispatch_ms": r(ms(woke - claimed)),
        })
    return {
        "count": count, "delay": delay, "spacing_s": spacing, "fired": len(rows), "missing": missing,
        "early": [x["reminderId"] for x in rows if x["lateness_ms"] < 0],
        "fired_more_than_once": [x["reminderId"] for x in rows if x["fireCount"] != 1],
        "lateness": summary([x["lateness_ms"] for x in rows]),
        "claim": summary([x["claim_ms"] for x in rows]),
        "dispatch": summary([x["dispatch_ms"] for x in rows]),
        "rows": rows,
    }


def measure_schedule(state_root: Path, firings: int) -> dict[str, Any]:
    """Wait for `firings` firings of the minutely schedule; read them from the SQLite file."""
    deadline = time.monotonic() + 60 * (firings + 1) + 30
    found: list[tuple[str, str]] = []
    while time.monotonic() < deadline:
        with sqlite3.connect(state_root / "db.sqlite3", timeout=20) as db:
            found = db.execute(
                "SELECT s.id, e.at FROM agent_sessions_session s JOIN agent_sessions_event e ON e.session_id = s.id "
                "WHERE s.channel = 'schedule' AND e.type = 'message.received' ORDER BY e.at"
            ).fetchall()
        if len(found) >= firings:
            break
        time.sleep(1)
    rows = []
    for session_id, received in found[:firings]:
        woke = at(received if "+" in received or received.endswith("Z") else received + "+00:00")
        boundary = woke.replace(second=0, microsecond=0)  # lateness is well under a minute
        rows.append({"sessionId": session_id, "due": boundary.isoformat(), "receivedAt": woke.isoformat(),
                     "lateness_ms": r(ms(woke - boundary))})
    return {"firings": firings, "fired": len(rows), "lateness": summary([x["lateness_ms"] for x in rows]), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reminders", type=int, default=20)
    parser.add_argument("--delay", default="5s", help="each reminder's delay (parse_duration: '5s', '1m')")
    parser.add_argument("--spacing", type=float, default=0.25, help="seconds between setting two reminders")
    parser.add_argument("--sweep-seconds", type=float, help="AGENTSITE_SWEEP_SECONDS for the server (default: its own)")
    parser.add_argument("--workers", type=int, help="qcluster workers (AGENTSITE_WORKERS)")
    parser.add_argument("--schedule-firings", type=int, default=0, help="also time this many minutely schedule firings")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep-state", action="store_true")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="agentsite-bench-timers-"))
    agent = write_agent(tmp / "agents", schedule=args.schedule_firings > 0)
    drop = {"DJANGO_SETTINGS_MODULE", "AGENTSITE_TEST_DB", "DATABASE_URL", "REDIS_URL", "AGENTSITE_STATE_ROOT",
            "AGENTSITE_INLINE_TURNS", "AGENTSITE_DEV"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="agentsite.settings")
    if args.sweep_seconds is not None:
        env["AGENTSITE_SWEEP_SECONDS"] = str(args.sweep_seconds)
    if args.workers:
        env["AGENTSITE_WORKERS"] = str(args.workers)
    tick = float(env.get("AGENTSITE_SWEEP_SECONDS", "1"))  # settings.py's default
    workers = int(env.get("AGENTSITE_WORKERS", "2"))

    server = Server(tmp / "state", agent, env)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        server.wait_ready()
        started = time.monotonic()
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            reminders = measure_reminders(client, args.reminders, args.delay, args.spacing)
        schedule = measure_schedule(server.state_root, args.schedule_firings) if args.schedule_firings else None
        elapsed = time.monotonic() - started
    finally:
        server.stop()

    report = {
        "bench": "timers",
        "at": datetime.now(timezone.utc).isoformat(),
        "config": {"database": "sqlite (embedded default)", "broker": "django-q2 ORM", "workers": workers,
                   "tick_interval_s": tick, "python": platform.python_version(), "cpus": os.cpu_count(),
                   "loadavg_at_end": os.getloadavg()},
        "reminders": reminders,
        "schedule": schedule,
        "elapsed_s": round(elapsed, 1),
    }
    out = args.out or ROOT / "bench" / "results" / f"timers-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))

    lat, claim, disp = reminders["lateness"], reminders["claim"], reminders["dispatch"]
    print(f"tick interval (AGENTSITE_SWEEP_SECONDS): {tick:g} s; workers: {workers}; load avg {os.getloadavg()[0]:.1f}")
    print(f"reminders: {reminders['fired']}/{reminders['count']} fired (delay {args.delay}), "
          f"missing {len(reminders['missing'])}, early {len(reminders['early'])}, "
          f"fired more than once {len(reminders['fired_more_than_once'])}")
    print(f"  lateness  (message.received at - due): p50 {lat['p50_ms']} ms  p95 {lat['p95_ms']} ms  max {lat['max_ms']} ms")
    print(f"  claim     (lastFiredAt - due):         p50 {claim['p50_ms']} ms  p95 {claim['p95_ms']} ms  max {claim['max_ms']} ms")
    print(f"  dispatch  (received - claimed):        p50 {disp['p50_ms']} ms  p95 {disp['p95_ms']} ms  max {disp['max_ms']} ms")
    if schedule:
        s = schedule["lateness"]
        print(f"schedule '* * * * *': {schedule['fired']}/{schedule['firings']} firings; "
              f"lateness p50 {s['p50_ms']} ms  max {s['max_ms']} ms")
    print(f"wrote {out}")
    if not args.keep_state:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"state kept in {tmp}")
    ok = not reminders["missing"] and not reminders["early"] and not reminders["fired_more_than_once"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
