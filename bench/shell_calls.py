"""What one `shell` call costs in the workspace sandbox, against the same call unsandboxed.

    .venv/bin/python bench/shell_calls.py [--calls 100] [--command "echo hi"]

Runs the command through `LocalShellFS.shell` (what the `shell` tool and the
direct tool route call) in a fresh workspace: first with the sandbox as a
session gets it (bubblewrap, limits, the server's Python and agents/ mounted),
then with `AGENTSITE_SANDBOX=off`'s plain `/bin/sh`, alternating the two so
both see the same machine. Prints p50/p95/max in ms for each and the p50
difference. Where a workspace can have a filesystem of its own
(`agents.workspaces.disks`: as root, on a local disk), the sandboxed call on
such a workspace is a third series, and the time to make and mount one
(`disks.create`, once per workspace) is printed too.
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

from agents.workspaces import disks, sandbox  # noqa: E402
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
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder) / "plain"
        workspace.mkdir()
        series = {"sandboxed": LocalShellFS(workspace, mounts=mounts), "plain": LocalShellFS(workspace)}
        made = []
        reason = disks.available(Path(folder))
        if not reason:
            (Path(folder) / "content").mkdir()
            for number in range(5):
                started = time.perf_counter()
                disks.create(Path(folder) / f"own{number}", Path(folder) / "content", runtime.limits().disk)
                made.append((time.perf_counter() - started) * 1000)
            series["own disk"] = LocalShellFS(Path(folder) / "own0", mounts=mounts)
        try:
            samples = run(series, options)
        finally:
            for number in range(len(made)):
                disks.remove(Path(folder) / f"own{number}")
    print(f"{options.calls} calls of {options.command!r}, alternating")
    for label, taken in samples.items():
        print(summary(label, taken))
    print(f"the sandbox adds {statistics.median(samples['sandboxed']) - statistics.median(samples['plain']):.1f} ms "
          "at p50")
    if made:
        print(f"a filesystem of its own adds {statistics.median(samples['own disk']) - statistics.median(samples['sandboxed']):.1f} ms "
              f"to a call at p50; making and mounting one (once per workspace) takes {statistics.median(made):.0f} ms")
    else:
        print(f"no filesystem of its own for a workspace here: {reason}")


def run(series: dict[str, LocalShellFS], options: argparse.Namespace) -> dict[str, list[float]]:
    for fs in series.values():
        timed(fs, options.command)  # warm every path
    samples: dict[str, list[float]] = {label: [] for label in series}
    for _ in range(options.calls):
        for label, fs in series.items():
            samples[label].append(timed(fs, options.command))
    return samples


if __name__ == "__main__":
    main()
