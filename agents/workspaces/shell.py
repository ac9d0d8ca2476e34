"""`shell` over a local workspace: `LocalShellFS`, the file verbs of `LocalFS` plus one command runner.

`shell` runs /bin/sh in the workspace as a process group of its own, with an
environment built from an allowlist (nothing of the server's: no database URL,
no provider keys, no secrets), stdin closed, its output capped, and a time
limit. On timeout or when the turn is stopped the whole group is killed; the
group is killed when the command ends too, so nothing it started in the
background outlives the call.

With the sandbox (agents.workspaces.sandbox, the default) the command sees
only the system's binaries, its workspace and what it is given to run; its
processes, memory, CPU time and the workspace's size are limited: on a
workspace with a filesystem of its own (`agents.workspaces.disks`) a write
past the disk limit fails (ENOSPC); on a plain directory the size is looked at
every 50 ms at most, and a workspace grown past its limit stops the command. With
`AGENTSITE_SANDBOX=off` it is the host's shell, as the server's user.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from agents.workspaces import disks, sandbox
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
                 env: dict[str, str] | None = None, mounts: sandbox.Mounts | None = None):
        super().__init__(root)
        self.timeout = timeout
        self.output_limit = output_limit
        self.env = dict(env or {})
        self.mounts = mounts  # None: unsandboxed (AGENTSITE_SANDBOX=off)

    def shell(self, args: ShellArgs, *, should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        cwd = self.resolve(args.cwd)
        with self.directory(cwd):
            pass
        root = self.real_root()
        directory = os.path.join(root, *cwd)
        limit = min(args.timeout_seconds or self.timeout, self.timeout)
        env = shell_environment(Path(root), self.env)
        should_stop = should_stop or (lambda: False)
        if self.mounts is None:
            return run_shell(["/bin/sh", "-c", args.command], directory, env, limit, self.output_limit, should_stop)
        quota = self.mounts.limits.disk
        try:
            own_disk = disks.ensure(Path(root))  # the kernel holds it to its size: nothing to watch
        except (disks.DiskError, OSError) as exc:
            raise WorkspaceError(f"cannot mount the workspace: {exc}") from None
        try:
            used = sandbox.hand_over(Path(root))
        except sandbox.TooDeep as exc:
            raise WorkspaceError(str(exc)) from None
        if used >= quota and not own_disk:
            raise WorkspaceError(f"the workspace holds {used} bytes, at or over its limit of {quota}: delete files "
                                 "before running commands")

        def over_quota() -> str | None:
            try:
                held = sandbox.disk_used(Path(root))
            except sandbox.TooDeep as exc:
                return str(exc)  # its size can no longer be counted: stopped as if over
            return f"the workspace reached {held} bytes, over its limit of {quota}" if held > quota else None

        mounts = replace(self.mounts, writable=(root,), file_limit=quota if own_disk else quota - used,
                         user=sandbox.runs_as(root))
        argv = sandbox.command(["/bin/sh", "-c", args.command], cwd=directory, mounts=mounts)
        return run_shell(argv, "/", env, limit, self.output_limit, should_stop, watch=None if own_disk else over_quota)


def run_shell(argv: list[str], cwd: str, env: dict[str, str], limit: float, output_limit: int,
              should_stop: Callable[[], bool], *, watch: Callable[[], str | None] | None = None) -> dict[str, Any]:
    """Run `argv` as a process group of its own; killed whole at `limit` seconds, when `should_stop()`,
    or when `watch()` names a reason.

    1. start it in a new session (its own process group), stdin closed;
    2. read stdout and stderr in threads, keeping the first `output_limit` bytes of each;
    3. wait for it without reaping it (its pid, and so its group id, cannot be reused
       meanwhile), checking the clock, `should_stop` and `watch` at most every 50 ms;
    4. kill the group: on timeout, stop or a watched limit, and also after a normal exit, so
       background jobs die too;
    5. reap it and collect the output.
    """
    try:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot start the shell: {exc.strerror}") from None
    captured = {"stdout": _Capture(process.stdout, output_limit), "stderr": _Capture(process.stderr, output_limit)}
    deadline = time.monotonic() + limit
    timed_out = stopped = False
    exceeded = None
    pause = 0.002  # short commands are answered quickly; longer ones are checked every 50 ms
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
        if watch is not None and (exceeded := watch()):
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
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
    if exceeded:
        result["stderr"] += f"\n[killed: {exceeded}]"
        result["limitExceeded"] = exceeded
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
