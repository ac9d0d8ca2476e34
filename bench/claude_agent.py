#!/usr/bin/env python
"""A turn on the Claude Agent SDK's runtime against the same turn on agentsite's loop.

Starts `manage.py serve` on the embedded default (SQLite; the rate limits and the running-turn cap
off, as every benchmark runs) with one agent that may run on `anthropic:claude-sonnet-4-5` (the loop)
and `claude-agent:claude-sonnet-4-5` (the runtime), both calling one loopback Messages API that
streams a short reply at once. Then, N times on each: a new session with its first turn, then a
follow-up on it. Each turn is read as NDJSON from
the request that starts it, and measured for (the loop's turns first, then the runtime's):

- first delta: the request sent → its first `message.appended` read;
- turn: the request sent → `session.waiting` read;
- server CPU: the serve process tree's CPU time over the turn, the runtime's children included.

A follow-up on the runtime goes to the child its session's first turn left: a worker that dequeues it
hands it to the worker keeping that child (`--workers`, 2 as serve's default; 1 has nothing to hand
over); `--no-keep` sets AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS=0, so every turn starts a child that
resumes from the stored conversation.

    .venv/bin/python bench/claude_agent.py              # 20 of each
    .venv/bin/python bench/claude_agent.py --count 50 --no-keep
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from turnslib.server import tree_cpu  # noqa: E402
from turnslib.stats import latency_line  # noqa: E402
from tests.providers.loopback import LoopbackModelServer, Reply, an_text  # noqa: E402
from tests.support import run_server  # noqa: E402

UNLIMITED = {"AGENTSITE_RATE_SESSIONS": "off", "AGENTSITE_RATE_MESSAGES": "off", "AGENTSITE_MAX_RUNNING_TURNS": "off"}
LOOP, RUNTIME = "anthropic:claude-sonnet-4-5", "claude-agent:claude-sonnet-4-5"
REPLY = "Hello! The order is on its way and should arrive tomorrow."


def write_agent(root: Path) -> Path:
    folder = root / "duo"
    shutil.copytree(ROOT / "examples" / "support" / "agent", folder / "agent",
                    ignore=shutil.ignore_patterns("__pycache__", "ab.py"))
    (folder / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\n"
        f"agent = Agent(models={[LOOP, RUNTIME]!r}, description='two runtimes', tools=[])\n")
    return folder


def turn(client: httpx.Client, pid: int, body: dict) -> tuple[float, float, float, str]:
    """(first delta ms, turn ms, server CPU ms, continuation token) of one turn."""
    cpu = tree_cpu(pid)
    started = time.perf_counter()
    first = None
    with client.stream("POST", "/duo/v1/session", json=body, headers={"Accept": "application/x-ndjson"}) as answer:
        token = answer.headers.get("x-continuation-token", "")
        for line in answer.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            if event["type"] == "message.appended" and first is None:
                first = time.perf_counter()
            elif event["type"] == "turn.failed":
                raise RuntimeError(f"the turn failed: {event['data']}")
            elif event["type"] == "session.waiting":
                done = time.perf_counter()
                break
    if first is None:
        raise RuntimeError("the turn streamed no delta")
    time.sleep(0.2)  # the worker's last writes after session.waiting land in this turn's CPU
    return (first - started) * 1000, (done - started) * 1000, (tree_cpu(pid) - cpu) * 1000, token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-keep", action="store_true", help="no live child between a session's turns")
    parser.add_argument("--workers", type=int, default=2,
                        help="turn workers (with several, a follow-up another dequeues is handed over)")
    opts = parser.parse_args()
    # No child closed to make room: a closed child's CPU time leaves the tree measured (the sandbox's init
    # reaps it), so every one is kept for the run; idle, each still wakes now and then, which counts.
    env = dict(UNLIMITED, AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS="0" if opts.no_keep else "600",
               AGENTSITE_CLAUDE_AGENT_KEPT=str(2 * (opts.count + opts.warmup)))
    print("limits off for the run: AGENTSITE_RATE_SESSIONS, AGENTSITE_RATE_MESSAGES, AGENTSITE_MAX_RUNNING_TURNS")
    results: dict[str, dict[str, list[float]]] = {
        f"{label} {kind}": {"first": [], "turn": [], "cpu": []}
        for label in ("loop", "runtime") for kind in ("new", "follow-up")}
    with tempfile.TemporaryDirectory(prefix="agentsite-claude-agent-bench-") as tmp, \
            LoopbackModelServer("anthropic") as model:
        model.replies.extend(Reply(events=an_text(REPLY)) for _ in range(4 * (opts.count + opts.warmup) + 8))
        env.update(ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="sk-ant-bench")
        folder = write_agent(Path(tmp))
        with run_server(Path(tmp) / "state", "--no-schedules", "--no-examples", "--agents", str(folder),
                        "--workers", str(opts.workers), env=env, migrated=False) as server, \
                httpx.Client(base_url=server.base_url, timeout=120) as client:
            pid = server.process.pid
            # The loop's turns first: a kept runtime child, idle, still wakes now and then, and its CPU would
            # count in the loop's turns otherwise.
            for label, model_id in (("loop", LOOP), ("runtime", RUNTIME)):
                for at in range(opts.warmup + opts.count):
                    new = turn(client, pid, {"message": "where is A100?", "model": model_id})
                    follow = turn(client, pid, {"message": "and A101?", "continuationToken": new[3]})
                    if at >= opts.warmup:
                        for kind, took in (("new", new), ("follow-up", follow)):
                            for name, value in zip(("first", "turn", "cpu"), took[:3]):
                                results[f"{label} {kind}"][name].append(value)
            errors = [line for line in server.output().splitlines() if "Traceback" in line or " ERROR " in line]
    for name, values in results.items():
        print(latency_line(f"{name} first delta", values["first"], width=28))
        print(latency_line(f"{name} turn", values["turn"], width=28))
        print(latency_line(f"{name} server CPU", values["cpu"], width=28))
    print(f"server log: {len(errors)} error line(s)")
    for line in errors[:5]:
        print("  ", line[:300])


if __name__ == "__main__":
    main()
