#!/usr/bin/env python
"""What a door adds to a turn: the MCP door's `ask` against the plain HTTP route, on the scripted model.

Starts `manage.py serve` on the embedded default (SQLite, examples/support; the rate limits and
the running-turn cap off, as every benchmark runs), then alternates, N times each so load drift
hits both alike, one new session and its turn:

- http: `POST /support/v1/session` with `Accept: application/x-ndjson`, read to `session.waiting`
  (the turn's events in the answer of the request that started it: one request, as an ask is);
- mcp: `ask` on `/support/mcp` through the official `mcp` client, one client session for the run.

    .venv/bin/python bench/doors.py              # 100 turns each way
    .venv/bin/python bench/doors.py --count 300
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from turnslib.stats import latency_line  # noqa: E402
from tests.support import run_server  # noqa: E402

UNLIMITED = {"AGENTSITE_RATE_SESSIONS": "off", "AGENTSITE_RATE_MESSAGES": "off", "AGENTSITE_MAX_RUNNING_TURNS": "off"}


async def http_turn(client: httpx.AsyncClient) -> float:
    started = time.perf_counter()
    async with client.stream("POST", "/support/v1/session", json={"message": "hello"},
                             headers={"Accept": "application/x-ndjson"}) as response:
        async for line in response.aiter_lines():
            if line and json.loads(line)["type"] == "session.waiting":
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("the stream ended before session.waiting")


async def mcp_turn(client) -> float:
    started = time.perf_counter()
    result = await client.call_tool("ask", {"message": "hello"})
    if result.is_error:
        raise RuntimeError(result.content[0].text)
    return (time.perf_counter() - started) * 1000


async def drive(base_url: str, count: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"http": [], "mcp": []}
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http, \
            Client(streamable_http_client(f"{base_url}/support/mcp")) as mcp:
        for at in range(warmup + count):
            took = {"http": await http_turn(http), "mcp": await mcp_turn(mcp)}
            if at >= warmup:
                for name, ms in took.items():
                    times[name].append(ms)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    opts = parser.parse_args()
    print("limits off for the run: AGENTSITE_RATE_SESSIONS, AGENTSITE_RATE_MESSAGES, AGENTSITE_MAX_RUNNING_TURNS")
    with tempfile.TemporaryDirectory(prefix="agentsite-doors-bench-") as tmp, \
            run_server(Path(tmp) / "state", "--no-schedules", env=UNLIMITED, migrated=False) as server:
        times = asyncio.run(drive(server.base_url, opts.count, opts.warmup))
        errors = [line for line in server.output().splitlines() if "Traceback" in line or " ERROR " in line]
    for name, values in times.items():
        print(latency_line(name, values, width=5))
    overhead = statistics.median(times["mcp"]) - statistics.median(times["http"])
    print(f"the MCP door adds {overhead:.1f} ms p50 to a turn; server log: {len(errors)} error line(s)")


if __name__ == "__main__":
    main()
