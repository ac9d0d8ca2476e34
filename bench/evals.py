"""How long `manage.py eval` takes for a suite of many cases against the scripted model.

    .venv/bin/python bench/evals.py [--cases 200] [--concurrency 20] [--workers N] [--url URL]

Writes a project to a temporary folder (a copy of examples/support's agent and one eval file of
`--cases` cases, each a lookup through `lookup_order` gated on the call and the reply), then times
`manage.py eval PROJECT --json` as a person runs it: with no --url the command starts its own
server (reported apart: the run's own `durationSeconds`, and the whole command with the server's
start and stop). Prints both, the cases per second and the p50/p95 of a case's duration.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUITE = '''\
from agents.sdk import define_eval, includes

ORDERS = ["A100", "A101", "A102"]


def lookup(order_id):
    def test(t):
        t.send('/call lookup_order {"order_id": "%s"}' % order_id)
        t.succeeded()
        t.called_tool("lookup_order")
        t.not_called_tool("refund_order")
        t.check(t.reply, includes(order_id))
    return test


cases = define_eval(tags=["bench"], cases=[
    {"id": f"case{n:04d}", "test": lookup(ORDERS[n % 3])} for n in range(CASES)
])
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--workers", type=int, help="turn workers of the command's server (default: its own)")
    parser.add_argument("--url", help="a running server with an agent named `bench` (default: the command's own)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-evals-") as folder:
        project = Path(folder) / "bench"
        shutil.copytree(ROOT / "examples" / "support" / "agent", project / "agent")
        (project / "evals").mkdir()
        (project / "evals" / "lookups_eval.py").write_text(SUITE.replace("CASES", str(args.cases)))
        command = [sys.executable, str(ROOT / "manage.py"), "eval", str(project), "--json",
                   "--concurrency", str(args.concurrency)]
        if args.workers:
            command += ["--workers", str(args.workers)]
        if args.url:
            command += ["--url", args.url]
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
        return 1
    durations = sorted(case["durationSeconds"] for case in report["cases"])
    p95 = durations[min(len(durations) - 1, int(len(durations) * 0.95))]
    print(f"{report['total']} cases at concurrency {args.concurrency}: {report['failed']} failed")
    print(f"  command (server start, run, stop): {wall:.1f} s")
    print(f"  run (from the command's report):   {report['durationSeconds']:.1f} s")
    print(f"  cases per second of the command:   {report['total'] / wall:.1f}")
    print(f"  a case: p50 {statistics.median(durations) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms")
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
