#!/usr/bin/env python
"""What a door adds to a turn: the MCP door's `ask` and the A2A door's `message/send` against the plain
HTTP route, on the scripted model.

Starts `manage.py serve` on the embedded default (SQLite, examples/support; the rate limits and
the running-turn cap off, as every benchmark runs), then alternates, N times each so load drift
hits both alike, one new session and its turn:

- http: `POST /support/v1/session` with `Accept: application/x-ndjson`, read to `session.waiting`
  (the turn's events in the answer of the request that started it: one request, as an ask is);
- mcp: `ask` on `/support/mcp` through the official `mcp` client, one client session for the run;
- a2a: `message/send` (not streaming) on `/support/a2a` through the official `a2a-sdk` client, made
  from the agent's card once for the run.

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
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a
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


async def a2a_turn(client) -> float:
    started = time.perf_counter()
    request = a2a.SendMessageRequest(message=a2a.Message(message_id="m", role=a2a.ROLE_USER,
                                                         parts=[a2a.Part(text="hello")]))
    async for response in client.send_message(request):
        if response.task.status.state != a2a.TASK_STATE_COMPLETED:
            raise RuntimeError(f"the task ended {response.task.status}")
    return (time.perf_counter() - started) * 1000


async def drive(base_url: str, count: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"http": [], "mcp": [], "a2a": []}
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http, \
            Client(streamable_http_client(f"{base_url}/support/mcp")) as mcp:
        card = await A2ACardResolver(http, f"{base_url}/support").get_agent_card()
        peer = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
        for at in range(warmup + count):
            took = {"http": await http_turn(http), "mcp": await mcp_turn(mcp), "a2a": await a2a_turn(peer)}
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
    for door in ("mcp", "a2a"):
        overhead = statistics.median(times[door]) - statistics.median(times["http"])
        print(f"the {door.upper()} door adds {overhead:.1f} ms p50 to a turn")
    print(f"server log: {len(errors)} error line(s)")


if __name__ == "__main__":
    main()
