"""The workers of one state root take the ticker's duty in turns (sessions.timers.ticker).

Real processes, each with a worker's ticker whose only job notes the process
in a file: while several run, one alone ticks; when it ends, another takes
over within a tick or two. A process holding a run-form reminder's handler
ticks whoever holds the lock (only it can fire that reminder).
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.sessions.test_concurrent_appends import python, writer_env
from tests.support import ROOT

CHILD = """
import os, sys, time
import django
django.setup()
from django.conf import settings
from sessions.timers import ticker
settings.AGENTSITE_SWEEP_SECONDS = 0.1
ticker._jobs[:] = [("note", lambda: open(sys.argv[1], "a").write(f"{os.getpid()}\\n"))]
ticker._holds_handlers = sys.argv[2] == "handlers"
ticker.Ticker(shared=True).start()
time.sleep(float(sys.argv[3]))
"""


def ticks(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def start(env, noted: Path, role: str = "worker", seconds: float = 60) -> subprocess.Popen:
    return subprocess.Popen(python(CHILD) + [str(noted), role, str(seconds)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_one_worker_ticks_at_a_time_and_another_takes_over_when_it_ends(tmp_path):
    env = writer_env(tmp_path / "state", None)
    (tmp_path / "state").mkdir()
    noted = tmp_path / "ticks"
    children = [start(env, noted) for _ in range(3)]
    try:
        wait_until(lambda: len(ticks(noted)) >= 10)
        time.sleep(0.5)  # every child has started and looked for the lock several times by now
        seen = ticks(noted)
        assert len(seen) >= 10 and len(set(seen)) == 1, seen
        holder = next(c for c in children if c.pid == seen[0])
        holder.kill()
        holder.wait()
        before = len(seen)
        wait_until(lambda: len(set(ticks(noted)[before:]) - {holder.pid}) == 1 and len(ticks(noted)) > before + 5)
        after = ticks(noted)[before:]
        successors = set(after) - {holder.pid}
        assert len(successors) == 1 and successors <= {c.pid for c in children}, after
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_process_holding_a_reminders_handler_ticks_beside_the_lock_holder(tmp_path):
    env = writer_env(tmp_path / "state", None)
    (tmp_path / "state").mkdir()
    noted = tmp_path / "ticks"
    worker = start(env, noted)
    try:
        wait_until(lambda: len(ticks(noted)) >= 3)
        holder = start(env, noted, role="handlers")
        try:
            wait_until(lambda: ticks(noted).count(holder.pid) >= 3)
            assert ticks(noted).count(holder.pid) >= 3 and worker.pid in ticks(noted)
        finally:
            holder.kill()
            holder.wait()
    finally:
        worker.kill()
        worker.wait()
    assert os.path.exists(tmp_path / "state" / "ticker.lock")
