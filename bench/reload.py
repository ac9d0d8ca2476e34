#!/usr/bin/env python
"""From saving an agent's file to the new release answering, under `serve --dev`.

1. Write a small agent folder (the scripted model, one tool) in a temp dir and
   start `manage.py serve --dev --agents <it>` on a fresh state root.
2. For each of N saves, alternately of `agent/instructions.md` (a new line of
   text) and of the tool's file (its input schema gains a field): note the
   time, save, then ask `GET /<slug>/v1/release` every 10 ms until the new
   version is active (`deployed`), and at once run a new session's turn in one
   request (`/system`, or `/tools`) and check that its reply carries the change
   (`answering`: the save to the reply's last byte).
3. Print p50/p95/max per kind and write the JSON report to
   bench/results/reload-<timestamp>.json (gitignored).

The playground's pages ask the release route every second, so the banner
("v4 deployed") shows up to one second after `deployed`.

    .venv/bin/python bench/reload.py
    .venv/bin/python bench/reload.py --saves 40 --keep-state

Every loop is bounded; the server is stopped at the end, on error and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.serving import free_port, stop_server, wait_until_healthy  # noqa: E402

AGENT = 'from agents.sdk import Agent\n\nagent = Agent(model="scripted:echo", name="Bench", tools=[])\n'
TOOL = '''from pydantic import BaseModel

from agents.sdk import tool


class Input(BaseModel):
    word: str
    field_{n}: int = {n}


@tool(description="Shout a word.", effect="read")
def shout(data: Input) -> str:
    return data.word.upper()
'''
WAIT_S = 30.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


def summary(samples: list[float]) -> dict[str, float]:
    return {"n": len(samples), "p50_ms": round(statistics.median(samples), 1),
            "p95_ms": round(percentile(samples, 95), 1), "max_ms": round(max(samples), 1)}


def turn_reply(client: httpx.Client, message: str) -> str:
    answer = client.post("/bench/v1/session", json={"message": message}, headers={"Accept": "application/x-ndjson"})
    answer.raise_for_status()
    events = [json.loads(line) for line in answer.text.splitlines() if line.strip()]
    return next(e["data"]["text"] for e in events if e["type"] == "message.completed")


def one_save(client: httpx.Client, folder: Path, n: int, version: int) -> tuple[str, float, float]:
    """Save the n-th change; (its kind, ms to deployed, ms to a new session's reply carrying it)."""
    kind = "instructions" if n % 2 else "tool schema"
    marker = f"Revision {n}."
    started = time.perf_counter()
    if kind == "instructions":
        (folder / "agent" / "instructions.md").write_text(f"You answer briefly. {marker}\n")
    else:
        (folder / "agent" / "tools" / "shout.py").write_text(TOOL.format(n=n))
    deadline = started + WAIT_S
    while client.get("/bench/v1/release").json()["version"] != version:
        if time.perf_counter() > deadline:
            raise SystemExit(f"save {n} ({kind}) was not deployed within {WAIT_S:g} s")
        time.sleep(0.01)
    deployed = time.perf_counter()
    said = turn_reply(client, "/system" if kind == "instructions" else "/tools")
    answered = time.perf_counter()
    if kind == "instructions" and marker not in said:
        raise SystemExit(f"save {n}: the new session did not run the new instructions: {said!r}")
    if kind == "tool schema":
        info = client.get("/bench/v1/info").json()
        [shout] = [t for t in info["tools"] if t["name"] == "shout"]
        if f"field_{n}" not in shout["inputSchema"]["properties"]:
            raise SystemExit(f"save {n}: /info does not show the new schema")
    return kind, (deployed - started) * 1000, (answered - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--keep-state", action="store_true", help="keep the temp dir (state root, server log)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="agentsite-bench-reload-"))
    folder = work / "bench"
    (folder / "agent" / "tools").mkdir(parents=True)
    (folder / "agent" / "agent.py").write_text(AGENT)
    (folder / "agent" / "instructions.md").write_text("You answer briefly.\n")
    (folder / "agent" / "tools" / "shout.py").write_text(TOOL.format(n=0))
    port = free_port()
    log = work / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "serve", "--dev", "--no-examples", "--workers", "1",
             "--port", str(port), "--state-root", str(work / "state"), "--agents", str(folder)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    samples: dict[str, dict[str, list[float]]] = {}
    try:
        wait_until_healthy(base, process, timeout=90, output=lambda: log.read_text(errors="replace"), name="serve")
        with httpx.Client(base_url=base, timeout=30) as client:
            turn_reply(client, "warm up")  # the first turn loads the release in the worker
            for n in range(1, args.saves + 1):
                time.sleep(0.2)  # apart from the last save's burst
                kind, deployed, answered = one_save(client, folder, n, version=n + 1)
                kept = samples.setdefault(kind, {"deployed": [], "answering": []})
                kept["deployed"].append(deployed)
                kept["answering"].append(answered)
    finally:
        stop_server(process, grace=20)
    report = {kind: {stage: summary(values) for stage, values in stages.items()} for kind, stages in samples.items()}
    for kind, stages in samples.items():
        for stage, values in stages.items():
            s = summary(values)
            print(f"{kind:13} {stage:10} n={s['n']:3}  p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  "
                  f"max {s['max_ms']:7.1f} ms")
    finish("reload", report, log, work, args.keep_state)


def finish(name: str, report: dict, log: Path, work: Path, keep_state: bool) -> None:
    """Count the server log's error lines into `report`, write it to bench/results/<name>-<stamp>.json,
    and remove the temp dir unless kept."""
    errors = [line for line in log.read_text(errors="replace").splitlines() if "Traceback" in line or "ERROR" in line]
    report["server_log_errors"] = len(errors)
    print(f"server log: {len(errors)} error lines ({log if keep_state else 'removed'})")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (results / f"{name}-{stamp}.json").write_text(json.dumps(report, indent=2))
    if not keep_state:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
