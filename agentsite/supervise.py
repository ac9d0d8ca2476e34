"""serve's supervisor: starts the web server and the workers, stops both together.

`manage.py serve` prepares (migrations, deployments, the environment) and
then replaces itself with this module through exec, so the process that
waits for the whole life of the server holds no Django, no models and no
deployed agents: a few MB instead of about 80. Its pid stays serve's, which
is the parent every child's lifeline is tied to.

    python -m agentsite.supervise '<json: {"commands": {...}, "cwd": ..., "banner": [...], "pass_fds": {...}}>'

It is started in `cwd`, the project's folder, where `-m` finds it whatever
folder serve was started from.

The children's environment is the supervisor's own, set by the exec: never
on the command line, which any local user can read (API keys live there).
A child named in `pass_fds` inherits those descriptors (serve's listening
socket, which the supervisor got across the exec); every other descriptor
is closed in the children.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

GRACE_SECONDS = 10


def supervise(commands: dict[str, list[str]], cwd: str, banner: list[str],
              pass_fds: dict[str, list[int]] | None = None) -> int:
    # Forked from the main thread: a child's lifeline tie fires when the forking thread ends.
    children = {
        name: subprocess.Popen(cmd, cwd=cwd, start_new_session=True, pass_fds=(pass_fds or {}).get(name, ()))
        for name, cmd in commands.items()
    }
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print("\n".join(banner), flush=True)

    exit_code = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                print(f"{name} exited with status {child.returncode}; stopping", file=sys.stderr, flush=True)
                exit_code = child.returncode or 1
                stopping = True
        time.sleep(0.2)
    shutdown(children)
    return exit_code


def shutdown(children: dict[str, subprocess.Popen]) -> None:
    # SIGTERM the child only, not its group: qcluster's main process stops
    # its sentinel and workers through a shared multiprocessing Event, and
    # a sentinel killed by the group signal while holding that Event's lock
    # leaves qcluster blocked forever in stop_event.set().
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
            child.wait()
    for child in children.values():  # leftovers of a group (qcluster's workers)
        _signal_group(child, signal.SIGKILL)
    print("agentsite stopped", flush=True)


def _signal_group(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exec_supervisor(commands: dict[str, list[str]], env: dict[str, str], cwd: str, banner: list[str],
                    pass_fds: dict[str, list[int]] | None = None) -> None:
    """Replace this process with the supervisor (never returns); descriptors in `pass_fds` must be inheritable."""
    sys.stdout.flush()
    sys.stderr.flush()
    spec = json.dumps({"commands": commands, "cwd": cwd, "banner": banner, "pass_fds": pass_fds or {}})
    os.chdir(cwd)
    os.execve(sys.executable, [sys.executable, "-m", "agentsite.supervise", spec], env)


if __name__ == "__main__":
    plan = json.loads(sys.argv[1])
    sys.exit(supervise(plan["commands"], plan["cwd"], plan["banner"], plan.get("pass_fds")))
