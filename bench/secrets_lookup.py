#!/usr/bin/env python
"""What reading an agent's credentials costs a turn: the secret lookup, in process.

A turn runs inside `acting_for(slug)`; its first `credential(...)` reads the
agent's secret rows in one query, and each read decrypts one value
(Fernet). This script deploys nothing: it makes an agent row with N secrets
on a fresh database (SQLite in a temp state root, or PostgreSQL with
`--postgres`), then times, per simulated turn:

  env        three `credential()` reads outside any agent (the environment alone,
             what every credential cost before agents had secrets);
  secrets    a new `acting_for` scope and three reads of the agent's secrets
             (one query, three decryptions);
  fallback   a new scope and three reads of names the agent has no secret for
             (one query, then the environment).

    .venv/bin/python bench/secrets_lookup.py
    .venv/bin/python bench/secrets_lookup.py --postgres --turns 5000

It prints the median and p95 per turn in microseconds and the queries per turn.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import inprocess  # noqa: E402
from bench.inprocess import drop  # noqa: E402


def setup(postgres: bool) -> str | None:
    return inprocess.setup("secrets", postgres)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL on 127.0.0.1:5432 instead of SQLite")
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--secrets", type=int, default=10, help="secrets the agent holds (three are read)")
    args = parser.parse_args()
    dbname = setup(args.postgres)
    try:
        run(args)
    finally:
        if dbname:
            drop(dbname)


def run(args) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.models import Agent, Secret
    from agents.secrets.lookup import credential
    from agents.secrets.store import acting_for

    agent = Agent.objects.create(slug="bench")
    names = [f"BENCH_SECRET_{i}" for i in range(args.secrets)]
    for name in names:
        Secret.put(agent, name, uuid.uuid4().hex * 2, by="bench")
    read = names[:3]
    env_names = ["BENCH_ENV_A", "BENCH_ENV_B", "BENCH_ENV_C"]
    for name in env_names:
        os.environ[name] = uuid.uuid4().hex

    def env_turn() -> None:
        for name in env_names:
            assert credential(name)

    def secrets_turn() -> None:
        with acting_for("bench"):
            for name in read:
                assert credential(name)

    def fallback_turn() -> None:
        with acting_for("bench"):
            for name in env_names:
                assert credential(name)

    print(f"database: {connection.vendor}, {args.turns} turns each, the agent holds {args.secrets} secrets")
    print(f"{'':10} {'p50 µs':>9} {'p95 µs':>9} {'queries':>8}")
    for label, turn in (("env", env_turn), ("secrets", secrets_turn), ("fallback", fallback_turn)):
        for _ in range(min(200, args.turns)):  # warm up: connection, key derivation, caches
            turn()
        with CaptureQueriesContext(connection) as queries:
            turn()
        times = []
        for _ in range(args.turns):
            started = time.perf_counter()
            turn()
            times.append((time.perf_counter() - started) * 1e6)
        print(f"{label:10} {statistics.median(times):9.1f} {percentile(times, 0.95):9.1f} {len(queries):8d}")


if __name__ == "__main__":
    main()
