"""A workspace directory on this host: the file verbs and `shell` over one tree.

Containment. Every path is checked twice:

1. lexically (`split_path`): relative, no `..`, no NUL, no backslash, no
   percent-encoded bytes;
2. against the disk: the real path (symbolic links resolved) must be the root
   or below it, compared by whole segments, so `/ws-evil` is not inside `/ws`.

Then the file is reached from an open descriptor of the root, one directory at
a time with O_NOFOLLOW, so a link swapped in between the check and the use
(a `shell` command running beside a file call) is refused instead of followed.

`shell` runs /bin/sh in the workspace as a process group of its own, with an
environment built from an allowlist (nothing of the server's: no database URL,
no provider keys, no secrets), stdin closed, its output capped, and a time
limit. On timeout or when the turn is stopped the whole group is killed; the
group is killed when the command ends too, so nothing it started in the
background outlives the call. `shell` is host bash: the path checks above hold
for the file verbs, not for what a command does. Agents that must not reach
the host leave `shell` out (`Agent(tools=[...])`, `local_runtime(shell=False)`)
or use `virtual_runtime`.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from agents.filesystems import (
    MAX_RESULTS,
    DeleteArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadArgs,
    ShellArgs,
    WorkspaceError,
    WriteArgs,
    glob_match,
    grep_texts,
    join,
    read_lines,
    replace_text,
    split_path,
    split_pattern,
)

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_GREP_FILE_BYTES = 2 * 1024 * 1024
SHELL_PATH = "/usr/local/bin:/usr/bin:/bin"
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def shell_environment(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment a command gets: a fixed allowlist plus what the agent declared."""
    env = {
        "PATH": SHELL_PATH, "HOME": str(root), "PWD": str(root), "SHELL": "/bin/sh", "TERM": "dumb",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC", "TMPDIR": "/tmp",
    }
    env.update(extra or {})
    return env


class LocalFS:
    """The file verbs over one host directory (`root`), contained as the module says."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalFS({str(self.root)!r})"

    # -- containment -----------------------------------------------------------------
    def real_root(self) -> str:
        try:
            return os.path.realpath(self.root, strict=True)
        except OSError:
            raise WorkspaceError("the workspace directory is gone") from None

    def resolve(self, path: str, *, follow_last: bool = True) -> tuple[str, ...]:
        """The segments, below the real root, of what `path` names; refused if that is outside.

        `follow_last=False` leaves a final symbolic link unresolved (delete removes the link itself),
        yet it is refused all the same when it points outside.
        """
        parts = split_path(path, absolute=False)
        root = self.real_root()
        target = os.path.realpath(os.path.join(root, *parts))
        if not _inside(target, root):
            raise WorkspaceError(f"{join(parts, False)} leads outside the workspace (through a symbolic link): refused")
        if follow_last or not parts:
            return tuple(Path(target).relative_to(root).parts)
        parent = os.path.realpath(os.path.join(root, *parts[:-1]))
        if not _inside(parent, root):
            raise WorkspaceError(f"{join(parts, False)} leads outside the workspace: refused")
        return tuple(Path(parent).relative_to(root).parts) + (parts[-1],)

    @contextmanager
    def directory(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """An open descriptor of the directory `parts`, reached without following any link."""
        fd = os.open(self.real_root(), DIRECTORY)
        try:
            for name in parts:
                try:
                    next_fd = os.open(name, DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise WorkspaceError(f"no directory {join(parts, False)}") from None
                    os.mkdir(name, 0o755, dir_fd=fd)
                    next_fd = os.open(name, DIRECTORY, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(exc, join(parts, False)) from None
                os.close(fd)
                fd = next_fd
            yield fd
        finally:
            os.close(fd)

    def _read_bytes(self, parts: tuple[str, ...], limit: int = MAX_FILE_BYTES) -> bytes:
        shown = join(parts, False)
        if not parts:
            raise WorkspaceError(". is a directory: list it with ls")
        with self.directory(parts[:-1]) as dir_fd:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
            except OSError as exc:
                raise _refusal(exc, shown) from None
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if stat.S_ISDIR(info.st_mode):
                    raise WorkspaceError(f"{shown} is a directory: list it with ls")
                if not stat.S_ISREG(info.st_mode):
                    raise WorkspaceError(f"{shown} is not a regular file")
                if info.st_size > limit:
                    raise WorkspaceError(f"{shown} is {info.st_size} bytes, more than {limit}: read it with shell")
                return handle.read(limit + 1)

    def _read_text(self, parts: tuple[str, ...]) -> str:
        data = self._read_bytes(parts)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkspaceError(f"{join(parts, False)} is not UTF-8 text") from None

    def put(self, path: str, data: bytes) -> str:
        """Write bytes at `path` (contained as every verb is); returns the path as the workspace names it."""
        parts = self.resolve(path)
        self._write_bytes(parts, data)
        return join(parts, False)

    def _write_bytes(self, parts: tuple[str, ...], data: bytes) -> None:
        shown = join(parts, False)
        if not parts:
            raise WorkspaceError(". is a directory: name a file")
        with self.directory(parts[:-1], create=True) as dir_fd:
            try:
                fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=dir_fd)
            except OSError as exc:
                raise _refusal(exc, shown) from None
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)

    def _files(self, base: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], int, str]]:
        """Regular files under `base`: (segments below base, containing dir fd, name). Links are not followed."""
        root = self.real_root()
        count = 0
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(os.path.join(root, *base), follow_symlinks=False):
            dirnames.sort()
            below = Path(dirpath).relative_to(root).parts[len(base):]
            for name in sorted(filenames):
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    count += 1
                    if count > 20 * MAX_RESULTS:
                        return
                    yield tuple(below) + (name,), dir_fd, name

    # -- the verbs ---------------------------------------------------------------------
    def read(self, args: ReadArgs) -> str:
        parts = self.resolve(args.path)
        return read_lines(self._read_text(parts), args, join(parts, False))

    def ls(self, args: LsArgs) -> dict[str, Any]:
        parts = self.resolve(args.path)
        entries = []
        with self.directory(parts) as fd:
            with os.scandir(fd) as listing:
                for entry in sorted(listing, key=lambda e: e.name):
                    info = entry.stat(follow_symlinks=False)
                    kind = ("symlink" if stat.S_ISLNK(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode)
                            else "file" if stat.S_ISREG(info.st_mode) else "other")
                    row: dict[str, Any] = {"name": entry.name, "type": kind}
                    if kind == "file":
                        row["size"] = info.st_size
                    entries.append(row)
                    if len(entries) >= MAX_RESULTS:
                        break
        return {"path": join(parts, False), "entries": entries}

    def glob(self, args: GlobArgs) -> dict[str, Any]:
        base = self.resolve(args.path)
        pattern = split_pattern(args.pattern)
        self._require_dir(base)
        found = sorted(join(base + below, False) for below, _, _ in self._files(base) if glob_match(pattern, below))
        return {"files": found[:MAX_RESULTS], "truncated": len(found) > MAX_RESULTS}

    def grep(self, args: GrepArgs) -> dict[str, Any]:
        base = self.resolve(args.path)
        with self.directory(base[:-1]) as fd:
            is_file = bool(base) and _is_regular(fd, base[-1])
        if is_file:
            return grep_texts(args, [(join(base, False), self._read_text(base))])
        self._require_dir(base)
        only = split_pattern(args.glob) if args.glob else None

        def texts():
            for below, dir_fd, name in self._files(base):
                if only is not None and not glob_match(only, below):
                    continue
                text = _read_small_text(dir_fd, name)
                if text is not None:
                    yield join(base + below, False), text

        return grep_texts(args, texts())

    def write(self, args: WriteArgs) -> dict[str, Any]:
        parts = self.resolve(args.path)
        data = args.content.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise WorkspaceError(f"content is {len(data)} bytes, more than {MAX_FILE_BYTES}")
        self._write_bytes(parts, data)
        return {"path": join(parts, False), "bytes": len(data)}

    def edit(self, args: EditArgs) -> dict[str, Any]:
        parts = self.resolve(args.path)
        shown = join(parts, False)
        text, replaced = replace_text(self._read_text(parts), args, shown)
        self._write_bytes(parts, text.encode("utf-8"))
        return {"path": shown, "replacements": replaced}

    def delete(self, args: DeleteArgs) -> dict[str, Any]:
        parts = self.resolve(args.path, follow_last=False)
        shown = join(parts, False)
        if not parts:
            raise WorkspaceError("the workspace root cannot be deleted")
        with self.directory(parts[:-1]) as dir_fd:
            try:
                info = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    # rmtree with dir_fd is resistant to links swapped in while it runs.
                    shutil.rmtree(parts[-1], dir_fd=dir_fd)
                else:
                    os.unlink(parts[-1], dir_fd=dir_fd)
            except OSError as exc:
                raise _refusal(exc, shown) from None
        return {"path": shown, "deleted": True}

    def _require_dir(self, parts: tuple[str, ...]) -> None:
        with self.directory(parts):
            pass


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


def _inside(path: str, root: str) -> bool:
    """Whole-segment containment: /ws/a is inside /ws; /ws-evil is not."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _is_regular(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_small_text(dir_fd: int, name: str) -> str | None:
    """A file's text for grep, or None (too big, binary, gone, or a link swapped in)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        data = handle.read(MAX_GREP_FILE_BYTES + 1)
    if len(data) > MAX_GREP_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _refusal(exc: OSError, shown: str) -> WorkspaceError:
    """An OSError as the model sees it: the workspace path, never the host's."""
    if exc.errno == errno.ELOOP:
        return WorkspaceError(f"{shown}: a symbolic link is in the way; file tools do not follow links that change")
    if exc.errno == errno.ENOTDIR:
        return WorkspaceError(f"{shown}: a part of this path is not a directory")
    if exc.errno == errno.ENOENT:
        return WorkspaceError(f"no file or directory {shown}")
    if exc.errno == errno.EISDIR:
        return WorkspaceError(f"{shown} is a directory")
    return WorkspaceError(f"{shown}: {exc.strerror or exc}")
