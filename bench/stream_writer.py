"""Appends events to one session's log for bench/stream.py, in the server's environment.

    stream_writer.py bulk SESSION_ID N        # N events, in batches, as fast as it can
    stream_writer.py paced SESSION_ID N MS    # N events one at a time, MS apart; prints
                                              # "<index> <unix time just after its commit>"

It runs with the server's settings (DATABASE_URL, REDIS_URL, the state root),
so its appends go through sessions.eventlog.events.append_events like a worker's: the
same commit, the same wake-up after it.
"""
from __future__ import annotations

import os
import sys
import time

import django


def main() -> int:
    sys.path.insert(0, os.getcwd())  # the project (bench/stream.py runs this with cwd there)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    django.setup()
    from sessions.eventlog.events import append_events
    from sessions.models import EventType

    mode, session_id, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "bulk":
        batch = 500
        for start in range(0, n, batch):
            count = min(batch, n - start)
            append_events(session_id, [(EventType.MESSAGE_APPENDED, {"delta": f"chunk {start + i} " + "x" * 60})
                                       for i in range(count)])
        return 0
    pause = float(sys.argv[4]) / 1000
    for i in range(n):
        events = append_events(session_id, [(EventType.MESSAGE_APPENDED, {"delta": f"paced {i}"})])
        print(f"{events[0].index} {time.time():.6f}", flush=True)  # after the commit: append_events has returned
        time.sleep(pause)
    time.sleep(0.5)  # wake-ups go out after commit from a background thread: let the last one leave
    return 0


if __name__ == "__main__":
    sys.exit(main())
