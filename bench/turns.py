#!/usr/bin/env python
"""Turn latency, throughput, CPU and memory of agentsite, end to end over HTTP.

It starts the server as separate processes on a fresh state root (a temp
dir): the web process (uvicorn serving `agentsite.asgi:application`, as serve runs it) and the worker
(`manage.py qcluster`), deploys examples/support (scripted model, no added
latency) and measures:

  W1  new session + one turn, sequential: from sending the create request to
      receiving `session.waiting` on the NDJSON stream (opened right after
      the create response). p50/p95/p99 and turns/s, plus where the time goes.
      With --one-request (W1 and W4): one POST /session with
      `Accept: application/x-ndjson`, whose answer is the turn's events.
  W2  follow-up turns on one session (rotating continuationToken), measured
      from the follow-up POST to its `session.waiting` on a stream kept open:
      p50 of the first and the last 50 turns (should be flat).
  W3  16 concurrent clients doing W1-style turns for 20 s: turns/s, p50/p95.
  W4  W1-style turns whose message makes one tool call
      (`/call lookup_order {"order_id": "A100"}`): p50/p95.

For every workload: the server's CPU ms per turn (user+system of the web
process and of the qcluster process tree, psutil, delta over the workload /
turns; on `pg` also the PostgreSQL backends serving its database, counted
in the total since SQLite does that work inside the server's processes), RSS (and USS) of each tree afterwards, and the idle CPU of each tree
for a moment after the workload. RSS is also sampled every 50 W1 sessions,
to tell whether it grows with the number of sessions.

Configurations: `embedded` (SQLite WAL, in-memory layer, ORM broker) and
`pg` (a throwaway PostgreSQL database + a free Redis db number; dropped /
cleaned at the end).

    .venv/bin/python bench/turns.py --config both
    .venv/bin/python bench/turns.py --config embedded --quick
    .venv/bin/python bench/turns.py --config pg --only W3 --profile /tmp/prof   # py-spy stacks per workload
    .venv/bin/python bench/profile_summary.py /tmp/prof/pg-W3-web.txt

Loopback only. Every loop is bounded in count and time; the server processes
are stopped at the end, on error and on Ctrl-C / SIGTERM.

The code is in bench/turnslib/ (`run` is the command line); the names
bench/stream.py and bench/webhooks.py import from here are re-exported.
"""
from __future__ import annotations

import sys

from turnslib.config import AGENT, PYTHON, BenchError, backend  # noqa: F401
from turnslib.run import main
from turnslib.server import Server, child_env  # noqa: F401
from turnslib.stats import pct  # noqa: F401

if __name__ == "__main__":
    sys.exit(main(__doc__.split("\n\n")[0]))
