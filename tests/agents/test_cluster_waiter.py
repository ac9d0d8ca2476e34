"""`manage.py qcluster` run on its own, as a deployment runs its workers: once its sentinel runs, the
command's process is the waiter (agents.cluster_waiter), which holds no Django, keeps the cluster's
title, and passes a stop signal on; the sentinel then stops its workers as django-q2 does. Real
processes on a real SQLite state root."""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agents.socketdir import bell_dir_for
from tests.support import ROOT, child_env, premigrate


def wait_for(condition, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def cluster(state: Path) -> tuple[subprocess.Popen, psutil.Process]:
    """A qcluster started on `state`, once its sentinel forked its four children (2 workers, pusher, monitor)."""
    state.mkdir()
    premigrate(state)
    process = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env=child_env(AGENTSITE_STATE_ROOT=str(state), AGENTSITE_WORKERS="2",
                                             AGENTSITE_LOG_LEVEL="INFO"))
    waiter = psutil.Process(process.pid)
    wait_for(lambda: len(waiter.children(recursive=True)) >= 5, "the sentinel and its four children")
    # The exec (what the command loaded, pydantic's core with the agents' SDK, is gone), then the waiter's
    # title: the cluster's, as before (tools and people find the process by it).
    wait_for(lambda: not any("pydantic_core" in m.path for m in waiter.memory_maps()), "the exec")
    wait_for(lambda: " ".join(waiter.cmdline()).startswith("qcluster MainProcess "), "the waiter's title")
    return process, waiter


def end(process: subprocess.Popen, tree: list[psutil.Process]) -> None:
    """Whatever of the cluster is left, killed: a failing test leaves no process behind."""
    for left in [psutil.Process(process.pid), *tree] if process.poll() is None else tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            left.kill()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_the_waiter_stops_the_cluster_in_order(tmp_path, stop):
    process, waiter = cluster(tmp_path / "state")
    tree = waiter.children(recursive=True)
    door = bell_dir_for(tmp_path / "state") / "task-door.sock"  # under the state root unless its path is long
    try:
        assert door.exists(), "the workers' task door (agents.taskdoor)"
        assert not any(m.path.endswith(".so") and "site-packages" in m.path and "setproctitle" not in m.path
                       for m in waiter.memory_maps()), "the waiter holds no extension module but its title's"
        process.send_signal(stop)
        output, _ = process.communicate(timeout=60)
    finally:
        end(process, tree)
    assert process.returncode == 0, output
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "the whole tree ended"
    assert "stopping cluster processes" in output and "stopped doing work" in output, output
    assert output.rstrip().endswith("has stopped."), output
    assert not door.exists(), "a stopped cluster shuts its door: knocks go through the broker"


@pytest.mark.timeout(120)
def test_a_sentinel_killed_ends_the_waiter_with_a_failure(tmp_path):
    process, waiter = cluster(tmp_path / "state")
    tree = waiter.children(recursive=True)
    try:
        [sentinel] = waiter.children()
        sentinel.kill()
        process.wait(timeout=60)
    finally:
        end(process, tree)  # as under django-q2's own cluster process, the sentinel's children live on
    output = process.stdout.read()
    assert process.returncode == 1, output
    assert "its sentinel exited with -9" in output, output
