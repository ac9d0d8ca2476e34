"""`memory_fs` (a dict of files in the process's memory) and `skills_fs` (the agent's skills, read-only)."""
from __future__ import annotations

import copy
import threading
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


class _MemoryTree:
    """Files in a dict by absolute path; directories are implied by the files under them."""

    def __init__(self, files: dict[str, str]):
        self._files: dict[str, str] = {}
        self._lock = threading.Lock()
        for path, content in files.items():
            if not isinstance(path, str) or not isinstance(content, str):
                raise TypeError(f"memory_fs takes {{path: text}}, not {type(path).__name__}: {type(content).__name__}")
            parts = split_path(path)
            if not parts:
                raise ValueError(f"memory_fs: {path!r} names the root, not a file")
            self._files[join(parts)] = content

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._files)

    def is_dir(self, parts: tuple[str, ...]) -> bool:
        prefix = join(parts).rstrip("/") + "/"
        return not parts or any(p.startswith(prefix) for p in self.snapshot())

    def walk(self, base: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
        """Files under `base`: (segments below base, content), in path order."""
        for path, content in sorted(self.snapshot().items()):
            parts = split_path(path)
            if parts[:len(base)] == base and len(parts) > len(base):
                yield parts[len(base):], content

    def read(self, args: ReadArgs) -> str:
        path = join(split_path(args.path))
        content = self.snapshot().get(path)
        if content is None:
            if self.is_dir(split_path(args.path)):
                raise WorkspaceError(f"{path} is a directory: list it with ls")
            raise WorkspaceError(f"no file {path}")
        return read_lines(content, args, path)

    def ls(self, args: LsArgs) -> dict[str, Any]:
        base = split_path(args.path)
        if join(base) in self.snapshot():
            raise WorkspaceError(f"{join(base)} is a file: read it with read")
        entries: dict[str, dict[str, Any]] = {}
        for below, content in self.walk(base):
            name = below[0]
            if len(below) == 1:
                entries[name] = {"name": name, "type": "file", "size": len(content.encode())}
            else:
                entries.setdefault(name, {"name": name, "type": "dir"})
        if not entries and base:
            raise WorkspaceError(f"no directory {join(base)}")
        return {"path": join(base), "entries": [entries[k] for k in sorted(entries)]}

    def glob(self, args: GlobArgs) -> dict[str, Any]:
        base, pattern = split_path(args.path), split_pattern(args.pattern)
        found = [join(base + below) for below, _ in self.walk(base) if glob_match(pattern, below)]
        return {"files": found[:MAX_RESULTS], "truncated": len(found) > MAX_RESULTS}

    def grep(self, args: GrepArgs) -> dict[str, Any]:
        base = split_path(args.path)
        files = self.snapshot()
        if join(base) in files:
            return grep_texts(args, [(join(base), files[join(base)])])
        only = split_pattern(args.glob) if args.glob else None
        return grep_texts(args, ((join(base + below), text) for below, text in self.walk(base)
                                 if only is None or glob_match(only, below)))


class _MemoryWrites:
    def write(self, args: WriteArgs) -> dict[str, Any]:
        parts = split_path(args.path)
        if not parts:
            raise WorkspaceError("the root is a directory: name a file")
        path = join(parts)
        with self._lock:
            if any(p.startswith(path + "/") for p in self._files):
                raise WorkspaceError(f"{path} is a directory")
            for i in range(1, len(parts)):
                if join(parts[:i]) in self._files:
                    raise WorkspaceError(f"{join(parts[:i])} is a file, not a directory")
            self._files[path] = args.content
        return {"path": path, "bytes": len(args.content.encode())}

    def edit(self, args: EditArgs) -> dict[str, Any]:
        path = join(split_path(args.path))
        with self._lock:
            if path not in self._files:
                raise WorkspaceError(f"no file {path}: create it with write")
            self._files[path], replaced = replace_text(self._files[path], args, path)
        return {"path": path, "replacements": replaced}

    def delete(self, args: DeleteArgs) -> dict[str, Any]:
        parts = split_path(args.path)
        if not parts:
            raise WorkspaceError("the root cannot be deleted")
        path = join(parts)
        with self._lock:
            doomed = [p for p in self._files if p == path or p.startswith(path + "/")]
            if not doomed:
                raise WorkspaceError(f"no file or directory {path}")
            for p in doomed:
                del self._files[p]
        return {"path": path, "deleted": len(doomed)}


class ReadOnlyMemoryFS(_MemoryTree):
    """memory_fs(..., writable=False): read, ls, glob, grep."""

    def for_session(self, ctx: Any) -> "ReadOnlyMemoryFS":
        return self  # nothing a session could change

    def __repr__(self) -> str:
        return "memory_fs(writable=False)"


class MemoryFS(_MemoryWrites, _MemoryTree):
    """memory_fs(...): every file verb; each session works on its own copy."""

    def for_session(self, ctx: Any) -> "MemoryFS":
        return MemoryFS(copy.deepcopy(self.snapshot()))

    def __repr__(self) -> str:
        return "memory_fs()"


def memory_fs(files: dict[str, str] | None = None, *, writable: bool = True) -> MemoryFS | ReadOnlyMemoryFS:
    """A tree of text files held in memory, e.g. `memory_fs({"/notes/todo.md": "- ship"})`.

    Passed straight to `virtual_runtime`, every session starts from these files
    and writes to a copy of its own. The copy lives in the worker process's
    memory: it is for tests and fixed trees, not for files that must outlast
    the process (use `local_runtime()` for those).
    """
    return (MemoryFS if writable else ReadOnlyMemoryFS)(dict(files or {}))


# -- skills_fs ----------------------------------------------------------------------------

class SkillsFS(ReadOnlyMemoryFS):
    """The agent's skills as `/<name>/SKILL.md` plus their files, read-only.

    Discovery (or the session's workspace, for a per-session factory) binds it
    to the agent's loaded skills; until then it is empty.
    """

    def __init__(self) -> None:
        super().__init__({})

    def bind(self, skills: dict[str, Any]) -> None:
        files = {}
        for skill in skills.values():
            files[f"/{skill.name}/SKILL.md"] = skill_markdown(skill)
            for rel, content in skill.files.items():
                files[f"/{skill.name}/{rel}"] = content
        with self._lock:
            self._files = files

    def brief(self) -> str:
        return "the agent's skills, one folder each with its SKILL.md (read-only)"

    def __repr__(self) -> str:
        return "skills_fs()"


def skill_markdown(skill: Any) -> str:
    """A skill as its SKILL.md: name and description as front matter, then the body."""
    return f"---\nname: {skill.name}\ndescription: {skill.description}\n---\n\n{skill.markdown.strip()}\n"


def skills_fs() -> SkillsFS:
    """The agent's own skills (read-only), to mount in a virtual workspace: `union_fs({"/skills": skills_fs()})`."""
    return SkillsFS()
