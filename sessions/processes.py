"""Which process holds something: `host:pid` ids, and whether such a process is gone.

A turn's claim, a direct call's lock and a run-form reminder's handler all
name the process holding them this way, so recovery can tell a holder that
died on this host from one that is alive or elsewhere.
"""
from __future__ import annotations

import os
import socket


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_gone(holder: str) -> bool:
    """True only when the process `holder` names was on this host and is gone."""
    host, _, pid = holder.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid))
