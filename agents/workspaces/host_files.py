"""`host_files_fs()`: the agent's durable file store (`ctx.host.files`) as a session filesystem.

    # agent/agent.py: the workspace sees the store at /host
    agent = Agent(runtime=virtual_runtime(union_fs({"/host": host_files_fs(), "/scratch": memory_fs({})})))

The store belongs to the server and a session's host exists only once a
session does, so `host_files_fs()` is a declaration: it has no file methods
(no capabilities) until it is bound. Binding happens where a session's
filesystem is built: `sessions.host.bind_filesystem(fs, host)` calls
`fs.bind_host(host)`, which returns a `HostFilesFilesystem` over
`host.files` (or a `HostFilesReader` for `read_only=True`). A filesystem
that composes others, such as a union of mounts, binds each of its mounts
the same way in its own `bind_host`.

The bound filesystem's methods are its capabilities: `read`, `ls`, `glob`,
`grep`, and unless read-only `write`, `edit`, `delete`. Paths are POSIX,
absolute from the mount's root (`/notes/plan.md`) or relative to it; `..`
is refused, so nothing outside the store (or outside `root`) is reachable.
Folders exist as path prefixes of files. The store's own rules apply under
it: a path is at most 1024 bytes, a file at most AGENTSITE_HOST_FILE_MAX_BYTES.

The store the filesystem needs is duck-typed (`sessions.host.files.Files`
is one): `read_bytes(path)` (FileNotFoundError if missing), `exists(path)`,
`write(path, content, *, if_sha256=None)` (`if_sha256`: write only over
that content, else raise a ValueError), `delete(path) -> bool`, and
`list(prefix)` giving objects with `.path` and `.size`; its paths are
relative and have no leading slash.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal

from agents.workspaces.filesystems import WorkspaceError, grep_texts, read_lines, replace_text

MAX_MATCHES = 1000


@dataclass(frozen=True)
class Entry:
    """One child of a folder, as `ls` lists it."""

    name: str
    path: str
    kind: Literal["file", "dir"]
    size: int | None = None  # files only


@dataclass(frozen=True)
class Match:
    """One line `grep` found."""

    path: str
    line: int
    text: str


def _unbound(self, args: Any) -> Any:
    raise WorkspaceError("host_files_fs() is reached only in a session (its files belong to the agent's host)")


@dataclass(frozen=True)
class HostFilesFS:
    """The declaration `host_files_fs(read_only=True)` returns.

    Its verbs are present (discovery and union_fs see what the bound filesystem
    will offer) but work only once bound: `for_session(ctx)`, the workspace
    protocol's per-session hook, binds it to `ctx.host`; `bind_host(host)` does
    the same for code that holds a host.
    """

    root: str = ""
    read_only: bool = True

    read = ls = glob = grep = _unbound

    def bind_host(self, host: Any) -> "HostFilesWorkspace":
        kind = HostFilesReader if self.read_only else HostFilesFilesystem
        return HostFilesWorkspace(kind(host.files, root=self.root))

    def for_session(self, ctx: Any) -> Any:
        if getattr(ctx, "host", None) is None:
            return self  # no session (listing the agent's tools): nothing to bind to
        return self.bind_host(ctx.host)

    def brief(self) -> str:
        return "the agent's durable file store" + (" (read-only)" if self.read_only else "")

    def __repr__(self) -> str:
        args = [repr(self.root)] if self.root else []
        return f"host_files_fs({', '.join(args + (['read_only=True'] if self.read_only else []))})"


@dataclass(frozen=True, repr=False)
class WritableHostFilesFS(HostFilesFS):
    read_only: bool = False

    write = edit = delete = _unbound


def host_files_fs(root: str = "", *, read_only: bool = False) -> HostFilesFS:
    """Mount the agent's file store (or its folder `root`) in a session's workspace.

    `read_only=True` leaves out write, edit and delete, so those tools are not offered.
    """
    if not isinstance(root, str) or "\x00" in root or ".." in root.split("/"):
        raise ValueError(f"host_files_fs root {root!r} must be a folder path of the store, without '..'")
    kind = HostFilesFS if read_only else WritableHostFilesFS
    return kind(root="/".join(p for p in root.split("/") if p not in ("", ".")))


class HostFilesWorkspace:
    """A bound store, speaking the workspace filesystem protocol (agents.workspaces.filesystems):
    each verb takes its tool's arguments, returns what the model sees, and raises
    WorkspaceError for what it refuses."""

    def __init__(self, inner: "HostFilesReader"):
        self.inner = inner
        verbs = ("read", "ls", "glob", "grep") + (("write", "edit", "delete")
                                                  if isinstance(inner, HostFilesFilesystem) else ())
        for verb in verbs:  # presence is the capability
            setattr(self, verb, getattr(self, f"_{verb}"))

    def __repr__(self) -> str:
        return f"host_files_fs({self.inner.root!r})"

    def brief(self) -> str:
        return "the agent's durable file store" + ("" if isinstance(self.inner, HostFilesFilesystem) else " (read-only)")

    @staticmethod
    def _refused(exc: Exception) -> WorkspaceError:
        return WorkspaceError(str(exc) or type(exc).__name__)

    def _run(self, call: Any) -> Any:
        try:
            return call()
        except WorkspaceError:
            raise
        except (OSError, ValueError) as exc:  # FileNotFoundError, IsADirectoryError, the store's limits
            raise self._refused(exc) from None

    def _read(self, args: Any) -> str:
        text = self._run(lambda: self.inner.read(args.path))
        return read_lines(text, args, self.inner.shown(self.inner.key(args.path)))

    def _ls(self, args: Any) -> dict[str, Any]:
        entries = self._run(lambda: self.inner.ls(args.path))
        return {"path": self.inner.shown(self.inner.key(args.path)),
                "entries": [{"name": e.name, "type": e.kind, **({"size": e.size} if e.kind == "file" else {})}
                            for e in entries]}

    def _glob(self, args: Any) -> dict[str, Any]:
        # relative to the mount, as glob() takes it
        base = self._run(lambda: self.inner.shown(self.inner.key(args.path))).strip("/")
        pattern = f"{base}/{args.pattern.lstrip('/')}" if base else args.pattern
        found = self._run(lambda: self.inner.glob(pattern))
        return {"files": found[:MAX_MATCHES], "truncated": len(found) > MAX_MATCHES}

    def _grep(self, args: Any) -> dict[str, Any]:
        key = self._run(lambda: self.inner.key(args.path))
        if self._run(lambda: self.inner._is_file(key)):
            keys = [key]
        else:
            keys = [f.path for f in self._run(lambda: self.inner._under(key))]
            if args.glob:
                regex = glob_regex(args.glob)
                keys = [k for k in keys if regex.match(k[len(key):].lstrip("/"))]

        def texts():
            for file_key in sorted(keys):
                try:
                    yield self.inner.shown(file_key), self.inner.store.read_bytes(file_key).decode("utf-8")
                except (UnicodeDecodeError, FileNotFoundError):
                    continue  # binary, or deleted since it was listed
        return grep_texts(args, texts())

    def _write(self, args: Any) -> dict[str, Any]:
        self._run(lambda: self.inner.write(args.path, args.content))
        return {"path": self.inner.shown(self.inner.key(args.path)), "bytes": len(args.content.encode())}

    def _edit(self, args: Any) -> dict[str, Any]:
        path = self.inner.shown(self.inner.key(args.path))
        data = self._run(lambda: self.inner.store.read_bytes(self.inner._file_key(args.path)))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkspaceError(f"{path} is not UTF-8 text") from None
        changed, replaced = replace_text(text, args, path)
        # Only over the content just read: a concurrent change is refused, never lost.
        self._run(lambda: self.inner.store.write(self.inner._file_key(args.path), changed,
                                                 if_sha256=hashlib.sha256(data).hexdigest()))
        return {"path": path, "replacements": replaced}

    def _delete(self, args: Any) -> dict[str, Any]:
        self._run(lambda: self.inner.delete(args.path))
        return {"path": self.inner.shown(self.inner.key(args.path)), "deleted": 1}


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob over relative paths: `*` and `?` stay within a folder, `**` spans folders, `[...]` a class."""
    parts = pattern.strip().lstrip("/").split("/")
    out = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:.*/)?")
            continue
        out.append(_segment_regex(part) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := _class_end(segment, i)) != -1:
            body = segment[i + 1:end]
            negate = body[:1] in ("!", "^")
            body = "".join("\\" + b if b in "\\[]^" else b for b in (body[1:] if negate else body) if b != "/")
            out.append("[" + ("^" if negate else "") + body + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _class_end(segment: str, start: int) -> int:
    """Where the class opened at `start` closes; a `]` first in the class is one of its characters."""
    i = start + 1
    if segment[i:i + 1] in ("!", "^"):
        i += 1
    if segment[i:i + 1] == "]":
        i += 1
    return segment.find("]", i)


class HostFilesReader:
    """The store under `root`, read-only: read, ls, glob, grep."""

    def __init__(self, store: Any, root: str = ""):
        self.store = store
        self.root = root

    # -- paths ---------------------------------------------------------------------------

    def key(self, path: str) -> str:
        """The store path of a filesystem path ('' is the mount's root)."""
        if not isinstance(path, str):
            raise ValueError(f"a path must be a string, not {type(path).__name__}")
        if "\x00" in path:
            raise ValueError(f"path {path!r} holds a NUL character")
        parts = [p for p in path.strip().split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ValueError(f"path {path!r} uses '..': give a path inside the mount, e.g. /notes/plan.md")
        relative = "/".join(parts)
        if self.root:
            return f"{self.root}/{relative}" if relative else self.root
        return relative

    def shown(self, key: str) -> str:
        """The filesystem path of a store path."""
        relative = key[len(self.root):].lstrip("/") if self.root else key
        return "/" + relative

    def _under(self, key: str) -> list[Any]:
        """The files below folder `key` (every file, for the root)."""
        prefix = f"{key}/" if key else ""
        return [f for f in self.store.list(prefix) if f.path.startswith(prefix)]

    def _is_file(self, key: str) -> bool:
        return key != self.root and self.store.exists(key)

    # -- capabilities --------------------------------------------------------------------

    def read(self, path: str) -> str:
        key = self.key(path)
        if not self._is_file(key):
            if key == self.root or self._under(key):
                raise IsADirectoryError(f"{path} is a folder: ls it, or read a file in it")
            raise FileNotFoundError(f"no file {path}")
        data = self.store.read_bytes(key)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not UTF-8 text ({len(data)} bytes)") from None

    def ls(self, path: str = "/") -> list[Entry]:
        key = self.key(path)
        if self._is_file(key):
            info = next((f for f in self.store.list(key) if f.path == key), None)
            return [Entry(name=key.rsplit("/", 1)[-1], path=self.shown(key), kind="file",
                          size=info.size if info else None)]
        files = self._under(key)
        if key != self.root and not files:
            raise FileNotFoundError(f"no folder {path}")
        prefix = f"{key}/" if key else ""
        entries: dict[str, Entry] = {}
        for f in files:
            name, _, rest = f.path[len(prefix):].partition("/")
            child = prefix + name
            if rest:
                entries.setdefault(name, Entry(name=name, path=self.shown(child), kind="dir"))
            else:
                entries[name] = Entry(name=name, path=self.shown(child), kind="file", size=f.size)
        return sorted(entries.values(), key=lambda e: e.name)

    def glob(self, pattern: str) -> list[str]:
        """Paths of the files matching `pattern` (`**/*.md`, `/notes/*.txt`), sorted."""
        if not isinstance(pattern, str) or "\x00" in pattern or ".." in pattern.split("/"):
            raise ValueError(f"glob pattern {pattern!r} must be a path pattern inside the mount, without '..'")
        regex = glob_regex(pattern)
        found = []
        for f in self._under(self.root):
            relative = f.path[len(self.root):].lstrip("/") if self.root else f.path
            if regex.match(relative):
                found.append("/" + relative)
        return sorted(found)

    def grep(self, pattern: str, path: str = "/", *, limit: int = MAX_MATCHES) -> list[Match]:
        """Lines matching the regular expression `pattern` in the file or folder `path` (text files only)."""
        try:
            regex = re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        key = self.key(path)
        keys = [key] if self._is_file(key) else [f.path for f in self._under(key)]
        if not keys and key != self.root:
            raise FileNotFoundError(f"no file or folder {path}")
        matches: list[Match] = []
        for file_key in sorted(keys):
            try:
                text = self.store.read_bytes(file_key).decode("utf-8")
            except (UnicodeDecodeError, FileNotFoundError):
                continue  # binary, or deleted since it was listed
            for number, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    matches.append(Match(path=self.shown(file_key), line=number, text=line))
                    if len(matches) >= limit:
                        return matches
        return matches


class HostFilesFilesystem(HostFilesReader):
    """The store under `root`: read, ls, glob, grep, write, edit, delete."""

    def _file_key(self, path: str) -> str:
        key = self.key(path)
        if key == self.root:
            raise IsADirectoryError(f"{path} is the mount's root folder, not a file")
        return key

    def write(self, path: str, content: str) -> None:
        """Create or replace a file; its folders need not exist."""
        key = self._file_key(path)
        if self._under(key):
            raise IsADirectoryError(f"{path} is a folder")
        parts = key.split("/")
        for depth in range(1, len(parts)):
            if self._is_file("/".join(parts[:depth])):
                raise NotADirectoryError(f"{self.shown('/'.join(parts[:depth]))} is a file, not a folder")
        self.store.write(key, content)

    def edit(self, path: str, old: str, new: str) -> None:
        """Replace the one occurrence of `old` with `new`; refused if `old` is missing or not unique.

        The write goes through only if the file is still as it was read, so a
        concurrent change is never lost (the store raises; read and edit again).
        """
        key = self._file_key(path)
        if not old:
            raise ValueError("old must not be empty: give the exact text to replace")
        if not self._is_file(key):
            raise FileNotFoundError(f"no file {path}")
        data = self.store.read_bytes(key)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not UTF-8 text") from None
        count = text.count(old)
        if count != 1:
            raise ValueError(f"old text found {count} times in {path}: it must appear exactly once "
                             "(include more of the surrounding text)")
        self.store.write(key, text.replace(old, new, 1), if_sha256=hashlib.sha256(data).hexdigest())

    def delete(self, path: str) -> None:
        key = self._file_key(path)
        if not self._is_file(key):
            if self._under(key):
                raise IsADirectoryError(f"{path} is a folder: delete its files")
            raise FileNotFoundError(f"no file {path}")
        if not self.store.delete(key):
            raise FileNotFoundError(f"no file {path}")
