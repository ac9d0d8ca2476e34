"""`shell` over a local workspace: `LocalShellFS`, the file verbs of `LocalFS` plus one command runner.

`shell` runs /bin/sh in the workspace as a process group of its own, with an
environment built from an allowlist (nothing of the server's: no database URL,
no provider keys, no secrets), stdin closed, its output capped, and a time
limit. On timeout or when the turn is stopped the whole group is killed; the
group is killed when the command ends too, so nothing it started in the
background outlives the call. `shell` is host bash: the path checks of `LocalFS` hold
for the file verbs, not for what a command does. Agents that must not reach
the host leave `shell` out (`Agent(tools=[...])`, `local_runtime(shell=False)`)
or use `virtual_runtime`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

from agents.workspaces.filesystems import ShellArgs, WorkspaceError
from agents.workspaces.localfs import LocalFS

SHELL_PATH = "/usr/local/bin:/usr/bin:/bin"


def shell_environment(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment a command gets: a fixed allowlist plus what the agent declared."""
    env = {
        "PATH": SHELL_PATH, "HOME": str(root), "PWD": str(root), "SHELL": "/bin/sh", "TERM": "dumb",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TMPDIR": "/tmp",
    }
    env.update(extra or {})
    return env


class LocalShellFS(LocalFS):
    """LocalFS with `shell` (`local_runtime()`'s default)."""

    def __init__(self, root: Path | str, *, timeout: float = 30.0, output_limit: int = 64 * 1024,
                 env: dict[str, str] | None = None):
        super().__init__(root)
        self.timeout = timeout
        self.output_limit = output_limit
        self.env = dict(env or {})

    def shell(self, args: ShellArgs, *, should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        cwd = self.resolve(args.cwd)
        with self.directory(cwd):
            pass
        directory = os.path.join(self.real_root(), *cwd)
        limit = min(args.timeout_seconds or self.timeout, self.timeout)
        return run_shell(args.command, directory, shell_environment(Path(self.real_root()), self.env), limit,
                         self.output_limit, should_stop or (lambda: False))


def run_shell(command: str, cwd: str, env: dict[str, str], limit: float, output_limit: int,
              should_stop: Callable[[], bool]) -> dict[str, Any]:
    """Run `command` as a process group of its own; killed whole at `limit` seconds or when `should_stop()`.

    1. start /bin/sh in a new session (its own process group), stdin closed;
    2. read stdout and stderr in threads, keeping the first `output_limit` bytes of each;
    3. wait for the shell without reaping it (its pid, and so its group id, cannot be reused
       meanwhile), checking the clock and `should_stop` every 50 ms;
    4. kill the group: on timeout or stop, and also after a normal exit, so background jobs die too;
    5. reap the shell and collect the output.
    """
    try:
        process = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                   close_fds=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot start the shell: {exc.strerror}") from None
    captured = {"stdout": _Capture(process.stdout, output_limit), "stderr": _Capture(process.stderr, output_limit)}
    deadline = time.monotonic() + limit
    timed_out = stopped = False
    while True:
        try:
            exited = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            exited = True
        if exited:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        if should_stop():
            stopped = True
            break
        time.sleep(0.05)
    kill_group(process.pid)
    process.wait()
    for capture in captured.values():
        capture.finish()
    if stopped:
        raise WorkspaceError("stopped: the turn was interrupted, and the command's processes were killed")
    result: dict[str, Any] = {
        "exitCode": process.returncode, "stdout": captured["stdout"].text(), "stderr": captured["stderr"].text(),
        "timedOut": timed_out, "truncated": any(c.truncated for c in captured.values()),
    }
    if timed_out:
        result["stderr"] += f"\n[killed after {limit:g} s: the workspace's time limit]"
    return result


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Capture:
    """One output pipe, drained in a thread; the first `limit` bytes are kept."""

    def __init__(self, pipe, limit: int):
        self.pipe = pipe
        self.limit = limit
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False
        self.thread = threading.Thread(target=self._drain, daemon=True, name="shell-output")
        self.thread.start()

    def _drain(self) -> None:
        try:
            while chunk := self.pipe.read1(65536):
                room = self.limit - self.kept
                if room > 0:
                    self.chunks.append(chunk[:room])
                    self.kept += min(room, len(chunk))
                if len(chunk) > max(room, 0):
                    self.truncated = True
        except (OSError, ValueError):
            pass

    def finish(self) -> None:
        # A process that left the group (setsid) may still hold the pipe: do not wait for it forever.
        self.thread.join(timeout=2)
        try:
            self.pipe.close()
        except OSError:
            pass

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        return text + (f"\n[output truncated at {self.limit} bytes]" if self.truncated else "")
