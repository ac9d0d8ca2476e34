#!/usr/bin/env python
"""Turns through nginx on two web hosts and two worker hosts (bench/hostslib/): latency from
creating a session to its `session.waiting`, which worker host ran each turn, and how many
PostgreSQL and Redis connections each host's processes hold once the turns are done (with
--streams idle streams open through nginx: the count a proxy and the servers must allow).

    .venv/bin/python bench/hosts.py [--turns 100] [--clients 4]

On the machine's PostgreSQL (a throwaway database) and Redis (a free db number);
the agent is tests/hosts/agents/streamer (scripted:echo; a short message streams as one chunk).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # agents.serving, which hostslib uses

from hostslib import ROOT, topology  # noqa: E402

AGENT = ROOT / "tests" / "hosts" / "agents" / "streamer"
# No schedules, and no per-principal limits: one client starts sessions far faster than a person.
ENV = {"AGENTSITE_SCHEDULES": "0", "AGENTSITE_RATE_SESSIONS": "off", "AGENTSITE_RATE_MESSAGES": "off",
       "AGENTSITE_MAX_RUNNING_TURNS": "off"}


def one_turn(topo, n: int) -> tuple[float, str]:
    with topo.client() as client:
        began = time.perf_counter()
        created = client.post("/streamer/v1/session", json={"message": f"turn {n}"})
        created.raise_for_status()
        session_id = created.json()["sessionId"]
        with client.stream("GET", f"/streamer/v1/session/{session_id}/stream") as response:
            for line in response.iter_lines():
                if line and json.loads(line)["type"] == "session.waiting":
                    break
        return time.perf_counter() - began, session_id


def connections(topo, ports: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per host: established TCP connections of all its processes to each service's port."""
    counts: dict[str, dict[str, int]] = {}
    for name, proc in topo.procs.items():
        found = Counter()
        for pid in proc.pids():
            try:
                for conn in psutil.Process(pid).net_connections(kind="tcp"):
                    if conn.raddr and conn.status == psutil.CONN_ESTABLISHED:
                        for service, port in ports.items():
                            found[service] += conn.raddr.port == port
            except psutil.NoSuchProcess:
                continue
        counts[name] = {"processes": len(proc.pids()), **{s: found[s] for s in ports}}
    return counts


def open_streams(topo, session_ids: list[str], n: int) -> list:
    """`n` idle NDJSON streams through nginx, held open (their responses are returned, unread)."""
    held = []
    for i in range(n):
        client = topo.client(timeout=30)
        request = client.build_request("GET", f"/streamer/v1/session/{session_ids[i % len(session_ids)]}/stream")
        held.append((client, client.send(request, stream=True)))
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--streams", type=int, default=100, help="idle streams held open while counting connections")
    parser.add_argument("--workers", type=int, default=2, help="django-q2 workers per worker host (AGENTSITE_WORKERS)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as folder, \
            topology(Path(folder), agents=[AGENT], env=ENV, workers_per_host=args.workers) as (topo, _, _):
        one_turn(topo, -1)  # warm up both paths
        began = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            results = list(pool.map(lambda n: one_turn(topo, n), range(args.turns)))
        wall = time.perf_counter() - began
        latencies = sorted(seconds * 1000 for seconds, _ in results)
        with psycopg.connect(topo.database_url.replace("postgres://", "postgresql://")) as conn:
            claims = [row[0] for row in conn.execute("SELECT claimed_by FROM agent_sessions_turn").fetchall()]
        hosts = Counter(topo.host_of_pid(int(c.rsplit(":", 1)[1])) or "gone" for c in claims if c)
        print(f"{args.turns} turns, {args.clients} clients through nginx: {args.turns / wall:.1f} turns/s, "
              f"p50 {statistics.median(latencies):.0f} ms, p95 {latencies[int(len(latencies) * 0.95) - 1]:.0f} ms")
        print("turns per worker host:", dict(hosts))
        held = open_streams(topo, [session_id for _, session_id in results], args.streams)
        time.sleep(3)
        ports = {"postgresql": int(topo.database_url.rsplit(":", 1)[1].split("/")[0]),
                 "redis": int(topo.redis_url.rsplit(":", 1)[1].split("/")[0])}
        print(f"connections held with {args.streams} idle streams open through nginx:")
        for name, row in connections(topo, ports).items():
            print(f"  {name:10} {row}")
        for client, response in held:
            response.close()
            client.close()


if __name__ == "__main__":
    main()
