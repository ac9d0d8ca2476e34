#!/usr/bin/env python
"""What A/B enrollment adds to creating a session, in process.

It deploys three copies of `examples/support` on a fresh SQLite database in a
temp state root: `plain` (no experiment), `skipped` (an experiment whose
`split_if` takes no session: the cost every session of an agent with
experiments pays) and `enrolled` (an experiment that takes every session by
hash), then times `sessions.turn.admission.start_session` for each, interleaved in a shuffled order,
the turns left queued (no worker runs them), and counts its queries.

    .venv/bin/python bench/ab_enrollment.py
    .venv/bin/python bench/ab_enrollment.py --sessions 3000

It prints the median and p95 per create in microseconds, and queries per create.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXPERIMENT = '''\
from agents.sdk import define_ab, split_by_session_hash, split_if

experiment = define_ab(
    "bench",
    variants={{"control": {{"label": "As written"}}, "brief": {{"label": "Brief", "instructions": "Be brief."}}}},
    split={split},
    derive={{"calls": lambda event: 1 if event.type == "action.result" else None}},
)
'''
SPLITS = {"skipped": 'split_if(lambda s: "#never" in s.message)', "enrolled": "split_by_session_hash()"}


def agent_folders(base: Path) -> dict[str, Path]:
    folders = {}
    for name in ("plain", "skipped", "enrolled"):
        folder = base / name
        shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns("ab.py", "__pycache__"))
        if name in SPLITS:
            (folder / "agent" / "ab.py").write_text(EXPERIMENT.format(split=SPLITS[name]))
        folders[name] = folder
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions created per agent")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="ab-bench-"))
    os.environ["AGENTSITE_STATE_ROOT"] = str(state)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.discovery import deploy_agent_folder
    from sessions.turn.admission import start_session
    from sessions.principal import Principal

    agents = {name: deploy_agent_folder(folder, slug=name).agent for name, folder in agent_folders(state / "agents").items()}
    caller = Principal(authenticator="bench", principal_id="bench")
    for agent in agents.values():  # warm: the release loaded and cached, statements prepared
        for _ in range(20):
            start_session(agent, caller, "Where is my order A100?")
    times: dict[str, list[float]] = {name: [] for name in agents}
    rounds = random.Random(7)
    for _ in range(args.sessions):
        order = list(agents.items())
        rounds.shuffle(order)  # no agent always goes first, or always right after another's commit
        for name, agent in order:
            started = time.perf_counter()
            start_session(agent, caller, "Where is my order A100?")
            times[name].append((time.perf_counter() - started) * 1e6)
    queries = {}
    for name, agent in agents.items():
        with CaptureQueriesContext(connection) as seen:
            start_session(agent, caller, "Where is my order A100?")
        queries[name] = len(seen.captured_queries)
    print(f"{'agent':10} {'median µs':>10} {'p95 µs':>10} {'queries':>8}   ({args.sessions} creates each, SQLite)")
    base = statistics.median(times["plain"])
    for name, values in times.items():
        median = statistics.median(values)
        p95 = statistics.quantiles(values, n=20)[-1]
        print(f"{name:10} {median:10.0f} {p95:10.0f} {queries[name]:8d}   {median - base:+.0f} µs vs plain")
    shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
