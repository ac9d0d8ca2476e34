#!/usr/bin/env python
"""daphne or uvicorn: what an open, idle event stream costs the web process on each.

For each ASGI server (as `manage.py serve --server` starts it; alternating, `--rounds` times)
on a fresh embedded state root (SQLite WAL, in-memory layer, ORM broker; or `--config pg`:
PostgreSQL + Redis):

1. start the web process and a qcluster worker (bench/turnslib), deploy examples/support;
2. create `--streams` sessions, each with one turn, in one request each (POST /session with
   Accept: application/x-ndjson, read to its session.waiting): every session is then idle;
3. read the web process's CPU (user+system) over `--seconds` with no stream open, and its
   PSS (/proc/<pid>/smaps_rollup);
4. open one NDJSON stream per session, from the end of its log (`startIndex`), so each one
   only waits (and, on the embedded default, polls the table at AGENTSITE_STREAM_POLL_IDLE);
   once every stream has its 200, wait a few seconds, then read the CPU over `--seconds`
   and the PSS again;
5. close the streams and stop the processes.

Reported per server: idle CPU % without streams, CPU % with them and the CPU ms per second
per stream, PSS per stream (KB). CPU per turn is bench/turns.py's (`--asgi daphne|uvicorn`).

    .venv/bin/python bench/server_choice.py                       # 300 streams, 20 s, 2 rounds
    .venv/bin/python bench/server_choice.py --streams 100 --seconds 10 --rounds 1

Loopback only; the server processes are stopped at the end, on error and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from turnslib.config import REDIS_HOST, ROOT, BenchError, pg_create, pg_drop, redis_cleanup, redis_pick_db
from turnslib.server import Server, busy_seconds, child_env

SETTLE_SECONDS = 3.0


def pss_kb(pid: int) -> int:
    """Proportional set size of one process: its private pages plus its share of shared ones."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise BenchError(f"no Pss in /proc/{pid}/smaps_rollup")


def web_cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def create_idle_sessions(base_url: str, n: int) -> list[tuple[str, int]]:
    """`n` sessions whose one turn has ended: (session id, the index after its last event)."""
    out: list[tuple[str, int]] = []
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for i in range(n):
            with client.stream("POST", "/support/v1/session", json={"message": f"idle stream {i}"},
                               headers={"Accept": "application/x-ndjson"}) as answer:
                if answer.status_code != 200:
                    raise BenchError(f"create: HTTP {answer.status_code} {answer.read()[:200]!r}")
                events = [json.loads(line) for line in answer.iter_lines() if line]
            if not events or events[-1]["type"] != "session.waiting":
                raise BenchError(f"session {answer.headers.get('X-Session-Id')}: the turn did not end")
            out.append((events[-1]["sessionId"], events[-1]["index"] + 1))
    return out


async def open_streams(port: int, sessions: list[tuple[str, int]]) -> list[asyncio.StreamWriter]:
    """One GET .../stream per session, each on its own connection, kept open; returns once each has its 200."""

    async def one(session_id: str, start: int) -> asyncio.StreamWriter:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /support/v1/session/{session_id}/stream?startIndex={start} HTTP/1.1\r\n"
                     f"Host: 127.0.0.1:{port}\r\nAccept: application/x-ndjson\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 30)
        if b" 200 " not in status:
            raise BenchError(f"stream of {session_id}: {status!r}")
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        writer.reader = reader  # type: ignore[attr-defined]  (kept referenced while the stream is open)
        return writer

    writers: list[asyncio.StreamWriter] = []
    for at in range(0, len(sessions), 50):  # 50 at a time: no burst of connects past the listen backlog
        writers += await asyncio.gather(*(one(s, i) for s, i in sessions[at:at + 50]))
    return writers


async def close_streams(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)


def measure_cpu(pid: int, seconds: float) -> tuple[float, float]:
    """The web process's CPU % of one core over `seconds`, and the other load on the machine (% of all cores)."""
    busy0, cpu0, t0 = busy_seconds(), web_cpu(pid), time.perf_counter()
    time.sleep(seconds)
    busy1, cpu1, elapsed = busy_seconds(), web_cpu(pid), time.perf_counter() - t0
    used = cpu1 - cpu0
    other = max(0.0, (busy1 - busy0) - used) / (elapsed * (psutil.cpu_count() or 1)) * 100
    return used / elapsed * 100, other


def run_one(asgi: str, args: argparse.Namespace, tmp: Path, label: str) -> dict[str, Any]:
    state_root = tmp / label
    state_root.mkdir(parents=True)
    counts = state_root / "counts"
    counts.mkdir()
    extra = {"AGENTSITE_STATE_ROOT": str(state_root), "AGENTSITE_RATE_SESSIONS": "off",
             "AGENTSITE_RATE_MESSAGES": "off", "AGENTSITE_MAX_RUNNING_TURNS": "off",
             "AGENTSITE_BENCH_COUNT_DIR": str(counts)}
    pg_db, redis_db = None, None
    if args.config == "pg":
        pg_db, redis_db = pg_create(), redis_pick_db(None)
        extra["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{pg_db}"
        extra["REDIS_URL"] = f"redis://{REDIS_HOST}/{redis_db}"
    server = Server(ROOT, state_root, child_env(extra), asgi=asgi)
    try:
        server.start()
        pid = server.pid("web")
        sessions = create_idle_sessions(server.base_url, args.streams)
        time.sleep(SETTLE_SECONDS)
        pss0 = pss_kb(pid)
        idle_pct, other0 = measure_cpu(pid, args.seconds)

        async def with_streams() -> tuple[float, float, int, int]:
            writers = await open_streams(server.port, sessions)
            try:
                await asyncio.sleep(SETTLE_SECONDS)
                cpu_pct, other = await asyncio.to_thread(measure_cpu, pid, args.seconds)
                return cpu_pct, other, pss_kb(pid), server.web_connections() or 0
            finally:
                await close_streams(writers)

        streams_pct, other1, pss1, conns = asyncio.run(with_streams())
        server.check_alive()
        n = len(sessions)
        return {
            "server": asgi, "streams": n, "connections_seen": conns,
            "idle_cpu_pct": round(idle_pct, 2), "streams_cpu_pct": round(streams_pct, 2),
            "cpu_ms_per_s_per_stream": round((streams_pct - idle_pct) * 10 / n, 3),
            "pss_mb_before": round(pss0 / 1024, 1), "pss_mb_with_streams": round(pss1 / 1024, 1),
            "pss_kb_per_stream": round((pss1 - pss0) / n, 1),
            "other_load_pct": round(max(other0, other1), 1),
        }
    finally:
        server.stop()
        if pg_db:
            pg_drop(pg_db)
        if redis_db is not None:
            redis_cleanup(redis_db)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", nargs="+", choices=["daphne", "uvicorn"], default=["daphne", "uvicorn"])
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=20.0, help="each CPU reading's length")
    parser.add_argument("--rounds", type=int, default=2, help="each server this many times, alternating")
    parser.add_argument("--config", choices=["embedded", "pg"], default="embedded")
    parser.add_argument("--out", help="JSON output path (default: print only)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="agentsite-server-choice-"))
    rows: list[dict[str, Any]] = []
    try:
        for round_ in range(args.rounds):
            for asgi in args.servers:
                row = run_one(asgi, args, tmp, f"{asgi}-{round_}")
                rows.append(row)
                print(json.dumps(row), flush=True)
    except KeyboardInterrupt:
        print("interrupted; processes stopped", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if rows:
            print(f"\n{'server':8} {'streams':>7} {'idle cpu%':>9} {'cpu% open':>9} {'ms/s/stream':>11} "
                  f"{'pss MB':>7} {'KB/stream':>9} {'other%':>6}")
            for r in rows:
                print(f"{r['server']:8} {r['streams']:>7} {r['idle_cpu_pct']:>9} {r['streams_cpu_pct']:>9} "
                      f"{r['cpu_ms_per_s_per_stream']:>11} {r['pss_mb_before']:>7} {r['pss_kb_per_stream']:>9} "
                      f"{r['other_load_pct']:>6}")
            if args.out:
                Path(args.out).write_text(json.dumps({"bench": "server_choice", "config": args.config,
                                                      "cpus": os.cpu_count(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
