"""A workspace directory on this host: the file verbs and `shell` over one tree.

Containment. Every path is checked twice:

1. lexically (`split_path`): relative, no `..`, no NUL, no backslash, no
   percent-encoded bytes;
2. against the disk: the real path (symbolic links resolved) must be the root
   or below it, compared by whole segments, so `/ws-evil` is not inside `/ws`.

Then the file is reached from an open descriptor of the root, one directory at
a time with O_NOFOLLOW, so a link swapped in between the check and the use
(a `shell` command running beside a file call) is refused instead of followed.

A hard link passes both checks: it is a real entry of the tree, yet `ln
/elsewhere/secret hard` (run with `shell`) gives it the content of a file
outside. The link count cannot say where a file's other names are, so a
regular file with more than one is refused by every verb, checked on the
descriptor that is read or written (a write opens without O_TRUNC, checks, and
only then truncates): read, write, edit and delete refuse it with a message
naming it; grep skips it, and refuses it when named; glob leaves it out, as it
leaves out symbolic links; ls lists it with the type "hardlink" and no size,
as it lists a symbolic link with the type "symlink". Deleting a directory
removes the hard links inside it with it: unlinking a name leaves the file's
other names as they are.

`shell` (the process-group runner) is in `agents.workspaces.shell`.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from agents.workspaces.filesystems import (
    MAX_RESULTS,
    DeleteArgs,
    EditArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadArgs,
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
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
                _require_own_file(info, shown)
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
                # No O_TRUNC: the file is checked before anything of it changes. O_NONBLOCK: a FIFO
                # without a reader is refused (ENXIO) rather than waited on.
                fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                             0o644, dir_fd=dir_fd)
            except OSError as exc:
                raise _refusal(exc, shown) from None
            with os.fdopen(fd, "wb") as handle:
                _require_own_file(os.fstat(fd), shown)
                handle.truncate(0)
                handle.write(data)

    def _files(self, base: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], int, str]]:
        """Regular files under `base`: (segments below base, containing dir fd, name).

        Symbolic links are not followed; hard links (files with more than one name) are left out.
        """
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
                if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
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
                            else "other" if not stat.S_ISREG(info.st_mode)
                            else "hardlink" if info.st_nlink > 1 else "file")
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
                if stat.S_ISREG(info.st_mode):
                    _require_own_file(info, shown)
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


def _inside(path: str, root: str) -> bool:
    """Whole-segment containment: /ws/a is inside /ws; /ws-evil is not."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _is_regular(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_small_text(dir_fd: int, name: str) -> str | None:
    """A file's text for grep, or None (too big, binary, gone, a hard link, or a symbolic link swapped in)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            return None
        data = handle.read(MAX_GREP_FILE_BYTES + 1)
    if len(data) > MAX_GREP_FILE_BYTES or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _require_own_file(info: os.stat_result, shown: str) -> None:
    """Refuse anything but a regular file with one name: another name may be outside the workspace."""
    if not stat.S_ISREG(info.st_mode):
        raise WorkspaceError(f"{shown} is not a regular file")
    if info.st_nlink > 1:
        raise WorkspaceError(f"{shown} is a hard link to a file elsewhere (it has {info.st_nlink} names, perhaps "
                             "outside the workspace): file tools do not read, change or delete it")


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
    if exc.errno == errno.ENXIO:
        return WorkspaceError(f"{shown} is not a regular file")
    return WorkspaceError(f"{shown}: {exc.strerror or exc}")
