"""serve's supervisor: waits on the web processes and the workers, stops them together.

`manage.py serve` prepares (migrations, deployments), forks its children from
its own set-up process (agentsite.lifeline.start_child: Django is loaded once
and its pages are shared), and then replaces itself with this module through
exec, so the process that waits for the whole life of the server holds no
Django, no models and no deployed agents: a few MB instead of about 80. Its
pid stays serve's, which is the parent every child is tied to, and the
children stay its children across the exec.

    python -m agentsite.supervise '<json: {"children": {"web": PID, ...}}>'

(`"lookSeconds"` in that JSON changes how often it looks at the children without a signal.)

Its environment is the one serve gives the exec; never its command line, which
any local user can read, holds a secret (the children's names and pids only).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time

from agents.signalwait import LOOK_SECONDS, STOP_SIGNALS, stop_signalled, take_signals
from sessions.plumbing.logcontext import JsonFormatter

GRACE_SECONDS = 10


class Child:
    """A child forked before the exec: waited on by pid (a Popen knows only what it started itself)."""

    def __init__(self, name: str, pid: int):
        self.name, self.pid, self.returncode = name, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped already (SIGCHLD ignored by whatever started serve): gone
                self.returncode = 0
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> bool:
        """Whether it exited within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def signal_group(self, sig: int) -> None:
        """`sig` to the child's session (it leads one): itself and what it forked."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def supervise(pids: dict[str, int], look_seconds: float = LOOK_SECONDS) -> int:
    """Wait, asleep (agents.signalwait), for a child to exit or a stop signal; look every `look_seconds` anyway."""
    children = [Child(name, pid) for name, pid in pids.items()]
    # exec_supervisor blocked the stop signals across the exec: one sent while this process was starting
    # is pending, and is taken by the first wait instead of arriving as a KeyboardInterrupt in an import.
    take_signals()
    exit_code = 0
    while True:
        for child in children:
            if child.poll() is not None:
                say(f"{child.name} exited with status {child.returncode}; stopping", logging.ERROR, sys.stderr)
                exit_code = child.returncode or 1
        if exit_code or stop_signalled(look_seconds):
            break
    shutdown(children)
    return exit_code


def shutdown(children: list[Child]) -> None:
    # SIGTERM the child only, not its group: the qcluster's process (agents.cluster_waiter) passes
    # the stop on to its sentinel, which stops the workers in order; the group's signal would end
    # every worker at once, mid-task.
    for child in children:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for child in children:
        if not child.wait(timeout=max(0.1, deadline - time.monotonic())):
            child.signal_group(signal.SIGKILL)
            child.wait(timeout=GRACE_SECONDS)
    for child in children:  # leftovers of a group (qcluster's workers)
        child.signal_group(signal.SIGKILL)
    say("agentsite stopped")


def say(message: str, level: int = logging.INFO, stream=sys.stdout) -> None:
    """A line of the server's output: under AGENTSITE_LOG_FORMAT=json a JSON one, as the children write
    theirs (without Django's logging set up, which this process does not load)."""
    if os.environ.get("AGENTSITE_LOG_FORMAT", "").strip().lower() == "json":
        record = logging.LogRecord("agentsite.supervise", level, __file__, 0, message, None, None)
        message = JsonFormatter().format(record)
    print(message, file=stream, flush=True)


def exec_supervisor(children: dict[str, int], env: dict[str, str], cwd: str) -> None:
    """Replace this process with the supervisor of `children` (name: pid), which never returns.

    It is started in `cwd`, the project's folder, where `-m` finds it whatever folder serve was started from.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    spec = json.dumps({"children": children})
    os.chdir(cwd)
    # A blocked signal stays pending across exec; `supervise` unblocks them once it handles them.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    os.execve(sys.executable, [sys.executable, "-m", "agentsite.supervise", spec], env)


if __name__ == "__main__":
    plan = json.loads(sys.argv[1])
    sys.exit(supervise(plan["children"], plan.get("lookSeconds", LOOK_SECONDS)))
