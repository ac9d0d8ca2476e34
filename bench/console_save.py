#!/usr/bin/env python
"""From saving a console agent (`PUT /v1/agents/<slug>`) to its new release answering.

1. Start `manage.py serve` (the embedded default, no examples) on a fresh state root and create
   an agent from data (`POST /v1/agents`, the scripted model), as the loopback operator.
2. For each of N saves: note the time, `PUT` the agent with its instructions changed (a new
   line of text, so each save is a new release), note when the answer came (`saved`: the release
   is made and active), then at once run a new session's turn in one request (`/system`) and check
   that its reply carries the new instructions (`answering`: the save's start to the reply's last
   byte). A save is what the playground's Save button sends.
3. Print p50/p95/max and write the JSON report to bench/results/console-save-<timestamp>.json.

    .venv/bin/python bench/console_save.py
    .venv/bin/python bench/console_save.py --saves 40 --keep-state

Every loop is bounded; the server is stopped at the end, on error and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.serving import free_port, stop_server, wait_until_healthy  # noqa: E402
from bench.reload import finish, summary, turn_reply  # noqa: E402

SPEC = {"name": "Bench", "models": ["scripted:echo"], "builtins": ["todos"],
        "skills": [{"name": "tone", "description": "How to write", "body": "Write plainly."}]}


def one_save(client: httpx.Client, n: int) -> tuple[float, float]:
    """The n-th save: (ms to the PUT's answer, ms to a new session's reply carrying the change)."""
    marker = f"Revision {n}."
    started = time.perf_counter()
    saved = client.put("/v1/agents/bench", json={**SPEC, "instructions": f"You answer briefly. {marker}"})
    saved.raise_for_status()
    if saved.json()["release"]["version"] != n + 1:
        raise SystemExit(f"save {n} did not make release v{n + 1}: {saved.text}")
    done = time.perf_counter()
    said = turn_reply(client, "/system")
    answered = time.perf_counter()
    if marker not in said:
        raise SystemExit(f"save {n}: the new session did not run the new instructions: {said!r}")
    return (done - started) * 1000, (answered - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--keep-state", action="store_true", help="keep the temp dir (state root, server log)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="agentsite-bench-console-"))
    port = free_port()
    log = work / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "serve", "--no-examples", "--port", str(port),
             "--state-root", str(work / "state")], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    samples: dict[str, list[float]] = {"saved": [], "answering": []}
    try:
        wait_until_healthy(base, process, timeout=90, output=lambda: log.read_text(errors="replace"), name="serve")
        with httpx.Client(base_url=base, timeout=30) as client:
            created = client.post("/v1/agents", json={**SPEC, "slug": "bench", "instructions": "You answer briefly."})
            created.raise_for_status()
            turn_reply(client, "warm up")  # the first turn loads the release in a worker
            for n in range(1, args.saves + 1):
                time.sleep(0.2)  # apart from the last save's burst
                saved, answered = one_save(client, n)
                samples["saved"].append(saved)
                samples["answering"].append(answered)
    finally:
        stop_server(process, grace=20)
    report = {stage: summary(values) for stage, values in samples.items()}
    for stage, values in samples.items():
        s = summary(values)
        print(f"{stage:10} n={s['n']:3}  p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  max {s['max_ms']:7.1f} ms")
    finish("console-save", report, log, work, args.keep_state)


if __name__ == "__main__":
    main()
