"""Children that die with their parent (`start_child`).

serve forks its web processes and the qcluster into sessions of their own, so
a kill -9 of serve (or the OOM killer) would leave them serving. Each child is
forked through this module, which ties it to serve before it runs anything,
with the at-fork hook below in place when the qcluster forks.

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
import signal
import sys
import threading
import time
import traceback
from typing import Callable

import setproctitle

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


def start_child(title: str, run: Callable[[], object], cwd: str) -> int:
    """Fork a child that runs `run()` tied to this process, and return its pid (in this process).

    The child is the leader of a session of its own (so a signal to serve's terminal or group reaches
    it only through serve), dies with this process, ties its own forks to itself, shows `title` as its
    command line (never this process's arguments: serve's hold bearer tokens), runs in `cwd`, and
    writes its output unbuffered. It leaves by SystemExit with run's result, so its exit handlers run
    as in any process; it never returns into the caller's code.
    """
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code: object = 1
    try:
        os.setsid()
        tie_to_parent(parent)
        tie_descendants()
        setproctitle.setproctitle(title)
        os.chdir(cwd)
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)
        code = run()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    raise SystemExit(code)
