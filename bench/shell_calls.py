"""What one `shell` call costs in the workspace sandbox, against the same call unsandboxed.

    .venv/bin/python bench/shell_calls.py [--calls 100] [--command "echo hi"]

Runs the command through `LocalShellFS.shell` (what the `shell` tool and the
direct tool route call) in a fresh workspace: first with the sandbox as a
session gets it (bubblewrap, limits, the server's Python and agents/ mounted),
then with `AGENTSITE_SANDBOX=off`'s plain `/bin/sh`, alternating the two so
both see the same machine. Prints p50/p95/max in ms for each and the p50
difference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

import django  # noqa: E402

django.setup()

from agents.workspaces import sandbox  # noqa: E402
from agents.workspaces.filesystems import ShellArgs  # noqa: E402
from agents.workspaces.runtimes import LocalRuntime  # noqa: E402
from agents.workspaces.shell import LocalShellFS  # noqa: E402


def timed(fs: LocalShellFS, command: str) -> float:
    started = time.perf_counter()
    result = fs.shell(ShellArgs(command=command))
    elapsed = (time.perf_counter() - started) * 1000
    if result["exitCode"] != 0:
        raise SystemExit(f"the command failed: {result}")
    return elapsed


def summary(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"{label:<12} p50 {statistics.median(ordered):6.1f} ms   p95 {p95:6.1f} ms   max {ordered[-1]:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--command", default="echo hi")
    options = parser.parse_args()

    state = sandbox.status()
    if not state.active:
        raise SystemExit(f"the sandbox is not active here: {state.reason or state.mode}")
    runtime = LocalRuntime()
    mounts = sandbox.Mounts(readable=(*sandbox.python_paths(), str(ROOT / "agents")), limits=runtime.limits())
    with tempfile.TemporaryDirectory() as workspace:
        sandboxed = LocalShellFS(workspace, mounts=mounts)
        plain = LocalShellFS(workspace)
        timed(sandboxed, options.command), timed(plain, options.command)  # warm both paths
        with_sandbox, without = [], []
        for _ in range(options.calls):
            with_sandbox.append(timed(sandboxed, options.command))
            without.append(timed(plain, options.command))
    print(f"{options.calls} calls of {options.command!r}, alternating")
    print(summary("sandboxed", with_sandbox))
    print(summary("plain", without))
    print(f"the sandbox adds {statistics.median(with_sandbox) - statistics.median(without):.1f} ms at p50")


if __name__ == "__main__":
    main()
