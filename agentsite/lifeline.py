"""Children that die with their parent: `python -m agentsite.lifeline --parent PID <command>`.

serve starts daphne and the qcluster in sessions of their own, so a kill -9
of serve (or the OOM killer) would leave them serving. Each child is started
through this module, which ties the process to serve and then runs the
command (`-m module args` or `script args`) in the same interpreter, so the
at-fork hook below is in place when the qcluster forks. (Popen's preexec_fn
could make the tie too, but it is unsafe in a process with threads.)

On Linux the tie is PR_SET_PDEATHSIG: the kernel sends SIGKILL when the
parent dies, however it dies, even if this process is stuck in C code, with
no polling. It is reset on fork, so an at-fork hook ties every forked
descendant to the process that forked it: the qcluster's sentinel, its
workers, pusher and monitor, and the workers it forks later when it recycles
one. Killing serve thus takes down the tree level by level. Elsewhere a
watchdog thread polls the parent pid instead.
"""
from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCHDOG_SECONDS = 0.5

_fork_parent = 0
_forked_on_main_thread = False


def tie_to_parent(parent_pid: int) -> None:
    """Die when `parent_pid`, the parent of this process, dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        args = [ctypes.c_ulong(n) for n in (signal.SIGKILL, 0, 0, 0)]  # prctl is variadic: pass full words
        if libc.prctl(PR_SET_PDEATHSIG, *args) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        threading.Thread(target=_watch, args=(parent_pid,), name="lifeline", daemon=True).start()
    # The parent may have died before the tie was made: nothing would signal us then.
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)


def _before_fork() -> None:
    global _fork_parent, _forked_on_main_thread
    _fork_parent = os.getpid()
    _forked_on_main_thread = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    # PDEATHSIG fires when the forking *thread* ends, so a child forked from a
    # short-lived thread would be killed with it: only main-thread forks are
    # tied (django-q2 forks from the main thread).
    if _forked_on_main_thread:
        tie_to_parent(_fork_parent)


def tie_descendants() -> None:
    """Tie every process forked from now on (and their own forks) to its parent."""
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def main(argv: list[str]) -> None:
    """`--parent PID -m module args...` or `--parent PID script args...`."""
    if len(argv) < 3 or argv[0] != "--parent":
        sys.exit("usage: python -m agentsite.lifeline --parent PID (-m module | script) [args...]")
    tie_to_parent(int(argv[1]))
    tie_descendants()
    command = argv[2:]
    if command[0] == "-m":
        sys.argv = command[1:]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = command
        sys.path[0] = os.path.dirname(os.path.abspath(command[0]))
        runpy.run_path(command[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
