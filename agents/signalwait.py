"""How a process that only waits on its children sleeps: its signals taken synchronously.

serve's supervisor (agentsite.supervise) and the qcluster's waiter (agents.cluster_waiter)
do nothing but wait for a child to exit or for a stop signal. Both block SIGCHLD and the
stop signals and sleep until the next one arrives (a blocked signal stays pending, so
none is missed between two looks, nor across an exec), so an idle server's waiters never
wake to poll; they look every LOOK_SECONDS all the same, as a safeguard. Standard library
only: both run without Django.
"""
from __future__ import annotations

import signal

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
WATCHED = frozenset({signal.SIGCHLD, *STOP_SIGNALS})
LOOK_SECONDS = 5  # a look at the children without a signal: never needed to notice an exit


def take_signals() -> None:
    """Block the watched signals, to be taken by `stop_signalled`, with SIGCHLD back to its default:
    whatever started this process may have set it ignored (which survives exec), and a child's exit
    would then signal nothing. A child that exited before this is found by the caller's first look."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)


def stop_signalled(look_seconds: float = LOOK_SECONDS) -> bool:
    """Sleep until a child exits, a stop signal comes or `look_seconds` pass; whether it was a stop signal."""
    taken = signal.sigtimedwait(WATCHED, look_seconds)
    return taken is not None and taken.si_signo in STOP_SIGNALS
