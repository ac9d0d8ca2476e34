"""What `manage.py qcluster`'s first process becomes once its sentinel runs: a waiter holding no Django.

django-q2's cluster process forks the sentinel (which forks the turn workers, the
pusher and the monitor) and then only waits: for a stop signal, to pass it on,
and for the sentinel to end. Yet it held everything it loaded before the fork
(Django, the agents' releases, the providers' SDKs), and the pages the other
processes wrote since were its own alone: 17 MB on PostgreSQL. So the qcluster
command replaces it (exec, same pid: the sentinel stays its child, and what
ties it to serve holds across the exec) with this module, which imports no
more than the standard library and the process title.

    python -m agents.cluster_waiter SENTINEL_PID TITLE NAME

A stop signal (SIGINT or SIGTERM) is passed to the sentinel as SIGTERM, on which
it stops its workers as django-q2 stops them (agents.management.commands.qcluster);
the waiter exits once the sentinel has: 0 when it stopped cleanly, 1 otherwise,
saying so as django-q2's cluster process would (a JSON line under AGENTSITE_LOG_FORMAT=json,
with the fields of the server's other lines).
"""
from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime, timezone

import setproctitle

from agents.signalwait import stop_signalled, take_signals



def wait_for(sentinel: int, name: str) -> int:
    take_signals()  # the stop signals were blocked across the exec already: none was lost
    stopping = False
    while True:
        try:
            pid, status = os.waitpid(sentinel, os.WNOHANG)
        except ChildProcessError:  # reaped already (SIGCHLD was ignored before this process set it)
            pid, status = sentinel, 0 if stopping else 1 << 8
        if pid:
            code = os.waitstatus_to_exitcode(status)
            if stopping and code == 0:
                say("INFO", f"Q Cluster {name} has stopped.")
                return 0
            say("ERROR", f"Q Cluster {name}: its sentinel exited with {code}")
            return 1
        if stop_signalled() and not stopping:
            stopping = True
            os.kill(sentinel, signal.SIGTERM)


def say(level: str, message: str) -> None:
    if os.environ.get("AGENTSITE_LOG_FORMAT", "").strip().lower() == "json":
        message = json.dumps({"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), "level": level,
                              "logger": "django-q", "message": message}, ensure_ascii=False)
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    setproctitle.setproctitle(sys.argv[2])
    sys.exit(wait_for(int(sys.argv[1]), sys.argv[3]))
