"""The supervisor `serve` execs into: a stop sent while it is still starting (its interpreter and
imports, seconds on a busy machine) is kept until it can act on it, then stops the children."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT, child_env

# Forks a child that would run for a minute, then, as serve does, execs the supervisor of it;
# the stop arrives before the exec, as it may arrive while the supervisor imports.
SCRIPT = """
import os, signal, subprocess
from agentsite.supervise import STOP_SIGNALS, exec_supervisor
child = subprocess.Popen(["sleep", "60"], start_new_session=True)
print(child.pid, flush=True)
signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
os.kill(os.getpid(), signal.SIGINT)  # pending: blocked until the supervisor handles it
exec_supervisor({"web": child.pid}, dict(os.environ), os.getcwd())
"""


def test_a_stop_sent_before_the_supervisor_is_ready_stops_the_server_once_it_is():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    child_pid, said = done.stdout.split("\n", 1)
    assert "agentsite stopped" in said and "Traceback" not in done.stderr
    assert subprocess.run(["kill", "-0", child_pid], capture_output=True).returncode != 0, "the child was stopped"


# A child that ends by itself a moment after the exec; the one who started serve may have set SIGCHLD
# ignored (kept across exec), which would leave the supervisor, asleep until a signal, unaware of the exit.
# Its look without a signal is put past the test's timeout: only the exit's own signal can end it in time.
EXITING = """
import json, os, signal, subprocess, sys
child = subprocess.Popen(["sleep", "1"], start_new_session=True)
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
plan = json.dumps({"children": {"web": child.pid}, "lookSeconds": 600})
os.execv(sys.executable, [sys.executable, "-m", "agentsite.supervise", plan])
"""


@pytest.mark.parametrize("sigchld", ["default", "ignored"])
def test_a_child_that_exits_stops_the_server_with_a_failure(sigchld):
    done = subprocess.run([sys.executable, "-c", EXITING, sigchld], cwd=ROOT, env=child_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "web exited with status 0; stopping" in done.stderr
    assert "agentsite stopped" in done.stdout and "Traceback" not in done.stderr
