"""Filesystems a workspace is made of, and the small protocol they follow.

A filesystem is any object with some of these methods; which ones it has is
what the model may do with it (a missing method is a missing tool):

    read(args: ReadArgs) -> str                 a text file's lines
    ls(args: LsArgs) -> dict                    a directory's entries
    glob(args: GlobArgs) -> dict                files whose path matches a pattern
    grep(args: GrepArgs) -> dict                lines (or files, or counts) matching a regex
    write(args: WriteArgs) -> dict              create or replace a whole file
    edit(args: EditArgs) -> dict                replace a string in an existing file
    delete(args: DeleteArgs) -> dict            remove a file or a directory
    shell(args: ShellArgs, *, should_stop) -> dict   run a command over the same tree

Each method takes the validated input model of its tool (below) and returns
what the model is shown. A refusal (a path that leaves the tree, a missing
file) is raised as `WorkspaceError`; its message is what the model sees.
Presence means a working method: a filesystem that cannot honour a verb
leaves the method out rather than raising "unsupported".

Two optional hooks:

    for_session(ctx) -> filesystem   the copy one session uses (memory_fs gives each
                                     session its own, so sessions never see each
                                     other's writes); without it, sessions share it
    brief() -> str                   what the model should know about this tree

Paths are POSIX paths rooted at the filesystem's `/`; relative paths are read
from `/`. `..`, NUL bytes, backslashes and percent-encoded bytes are refused
everywhere (`split_path`).

The filesystems here: `memory_fs` (a dict of files, in the process's memory),
`union_fs` (mounts under prefixes, routed by longest prefix) and `skills_fs`
(the agent's skills, read-only). The directory of a local runtime is in
`agents.localfs`.
"""
from __future__ import annotations

import copy
import fnmatch
import functools
import re
import threading
from typing import Any, Callable, Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field

FILE_VERBS = ("read", "ls", "glob", "grep", "write", "edit", "delete")
VERBS = FILE_VERBS + ("shell",)
WRITE_VERBS = frozenset({"write", "edit", "delete", "shell"})

MAX_READ_CHARS = 256 * 1024
MAX_RESULTS = 1000
PERCENT_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


class WorkspaceError(Exception):
    """A workspace call refused or failed; the message is what the model sees."""


# -- the tools' inputs ------------------------------------------------------------------

class Args(BaseModel):
    # A misspelt argument is an error the model can correct, not a silently ignored key.
    model_config = ConfigDict(extra="forbid")


class ReadArgs(Args):
    path: str = Field(description="The file to read")
    offset: int = Field(default=1, ge=1, description="The first line to return (1-based)")
    limit: int | None = Field(default=None, ge=1, description="How many lines to return (default: all)")


class LsArgs(Args):
    path: str = Field(default=".", description="The directory to list (default: the workspace root)")


class GlobArgs(Args):
    pattern: str = Field(description="A glob pattern relative to `path`: `*` and `?` match within one "
                                     "path segment, `**` matches any number of segments (e.g. `**/*.py`)")
    path: str = Field(default=".", description="The directory to search from (default: the workspace root)")


class GrepArgs(Args):
    pattern: str = Field(description="A Python regular expression")
    path: str = Field(default=".", description="The file or directory to search (default: the workspace root)")
    glob: str | None = Field(default=None, description="Only search files whose path under `path` matches this glob")
    output_mode: Literal["content", "files", "count"] = Field(
        default="content", description="content: matching lines; files: paths of matching files; count: matches per file")
    case_insensitive: bool = False
    max_results: int = Field(default=200, ge=1, le=MAX_RESULTS, description="Stop after this many results")


class WriteArgs(Args):
    path: str = Field(description="The file to create or replace (parent directories are created)")
    content: str = Field(description="The whole new content of the file")


class EditArgs(Args):
    path: str = Field(description="The existing file to change")
    old_text: str = Field(min_length=1, description="The exact text to replace; it must occur once unless replace_all")
    new_text: str = Field(description="The text to put in its place")
    replace_all: bool = Field(default=False, description="Replace every occurrence")


class DeleteArgs(Args):
    path: str = Field(description="The file or directory to remove")


class ShellArgs(Args):
    command: str = Field(min_length=1, description="A /bin/sh command line")
    cwd: str = Field(default=".", description="The directory to run it in (default: the workspace root)")
    timeout_seconds: float | None = Field(default=None, gt=0,
                                          description="Kill it after this long (capped by the workspace's limit)")


ARGS: dict[str, type[BaseModel]] = {
    "read": ReadArgs, "ls": LsArgs, "glob": GlobArgs, "grep": GrepArgs, "write": WriteArgs, "edit": EditArgs,
    "delete": DeleteArgs, "shell": ShellArgs,
}


def name_of(fs: Any) -> str:
    """A filesystem as manifests and briefs name it: its repr, or its class when the repr
    would only be an address (a manifest must not change from one load to the next)."""
    if type(fs).__repr__ is object.__repr__:
        return f"{type(fs).__name__}()"
    return repr(fs)


def methods_of(fs: Any) -> frozenset[str]:
    """The verbs a filesystem implements: its capabilities."""
    return frozenset(v for v in VERBS if callable(getattr(fs, v, None)))


# -- paths ------------------------------------------------------------------------------

def split_path(path: str, *, absolute: bool = True) -> tuple[str, ...]:
    """A path's segments under the root, or WorkspaceError if it could name anything else.

    `absolute`: a leading `/` means the root (virtual trees); otherwise it is
    refused (a local workspace, where it would name a host path).
    """
    if not isinstance(path, str):
        raise WorkspaceError("a path must be a string")
    if "\x00" in path:
        raise WorkspaceError(f"path {path!r} holds a NUL byte: refused")
    if PERCENT_ENCODED.search(path):
        raise WorkspaceError(f"path {path!r} holds percent-encoded bytes: pass the plain path")
    if "\\" in path:
        raise WorkspaceError(f"path {path!r} holds a backslash: separate directories with '/'")
    if path.startswith("/") and not absolute:
        raise WorkspaceError(f"path {path!r} is absolute: paths are relative to the workspace directory")
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise WorkspaceError(f"path {path!r} climbs out with '..': paths stay inside the workspace")
    return parts


def join(parts: Iterable[str], absolute: bool = True) -> str:
    text = "/".join(parts)
    if absolute:
        return "/" + text
    return text or "."


def split_pattern(pattern: str) -> tuple[str, ...]:
    """A glob pattern's segments (relative to the search directory)."""
    if "\x00" in pattern:
        raise WorkspaceError("the pattern holds a NUL byte: refused")
    parts = tuple(p for p in pattern.split("/") if p not in ("", "."))
    if ".." in parts:
        raise WorkspaceError(f"pattern {pattern!r} climbs out with '..': patterns match below `path`")
    if not parts:
        raise WorkspaceError("the pattern is empty")
    return parts


def glob_match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Whether a path's segments match a pattern's: `**` spans any number of segments,
    other segments match one segment each with fnmatch rules (case-sensitive)."""
    return _match(pattern, 0, parts, 0, {})


def _match(pattern: tuple[str, ...], i: int, parts: tuple[str, ...], j: int, seen: dict) -> bool:
    key = (i, j)
    if key in seen:
        return seen[key]
    if i == len(pattern):
        result = j == len(parts)
    elif pattern[i] == "**":
        result = _match(pattern, i + 1, parts, j, seen) or (j < len(parts) and _match(pattern, i, parts, j + 1, seen))
    else:
        result = j < len(parts) and fnmatch.fnmatchcase(parts[j], pattern[i]) and _match(pattern, i + 1, parts, j + 1, seen)
    seen[key] = result
    return result


def compile_grep(args: GrepArgs) -> re.Pattern:
    try:
        return re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
    except re.error as exc:
        raise WorkspaceError(f"invalid regular expression {args.pattern!r}: {exc}") from None


def grep_texts(args: GrepArgs, texts: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Search (path, text) pairs as `grep` does; stops at `max_results`."""
    regex = compile_grep(args)
    matches: list[dict[str, Any]] = []
    files: list[str] = []
    counts: list[dict[str, Any]] = []
    found = 0
    truncated = False
    for path, text in texts:
        hits = 0
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                hits += 1
                if args.output_mode == "content":
                    if found >= args.max_results:
                        truncated = True
                        break
                    matches.append({"path": path, "line": number, "text": line[:500]})
                    found += 1
        if hits and args.output_mode == "files":
            if found >= args.max_results:
                truncated = True
            else:
                files.append(path)
                found += 1
        elif hits and args.output_mode == "count":
            if found >= args.max_results:
                truncated = True
            else:
                counts.append({"path": path, "count": hits})
                found += 1
        if truncated:
            break
    key, value = {"content": ("matches", matches), "files": ("files", files), "count": ("counts", counts)}[args.output_mode]
    return {key: value, "truncated": truncated}


def read_lines(text: str, args: ReadArgs, shown_path: str) -> str:
    """The lines `offset`/`limit` select, capped at MAX_READ_CHARS."""
    if args.offset > 1 or args.limit is not None:
        lines = text.splitlines(keepends=True)
        if args.offset > max(len(lines), 1):
            raise WorkspaceError(f"{shown_path} has {len(lines)} lines; offset {args.offset} is past its end")
        end = None if args.limit is None else args.offset - 1 + args.limit
        text = "".join(lines[args.offset - 1:end])
    if len(text) > MAX_READ_CHARS:
        return text[:MAX_READ_CHARS] + f"\n[truncated at {MAX_READ_CHARS} characters: read on with offset/limit]"
    return text


def replace_text(text: str, args: EditArgs, shown_path: str) -> tuple[str, int]:
    count = text.count(args.old_text)
    if count == 0:
        raise WorkspaceError(f"old_text was not found in {shown_path}: read the file and copy the text exactly")
    if count > 1 and not args.replace_all:
        raise WorkspaceError(f"old_text occurs {count} times in {shown_path}: include more context to make it "
                             "unique, or set replace_all")
    return text.replace(args.old_text, args.new_text), count if args.replace_all else 1


# -- memory_fs ----------------------------------------------------------------------------

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


# -- union_fs -----------------------------------------------------------------------------

class UnionFS:
    """Filesystems mounted under prefixes. A path goes to the mount with the longest
    prefix containing it; the union has a verb when any mount has it. `shell` is
    never offered: a command could not see the other mounts."""

    def __init__(self, mounts: dict[str, Any]):
        if not isinstance(mounts, dict) or not mounts:
            raise ValueError("union_fs takes {'/prefix': filesystem, ...} with at least one mount")
        self.mounts: dict[tuple[str, ...], Any] = {}
        for prefix, fs in mounts.items():
            if not isinstance(prefix, str) or not prefix.startswith("/"):
                raise ValueError(f"union_fs: mount point {prefix!r} must be an absolute path like '/repo'")
            try:
                parts = split_path(prefix)
            except WorkspaceError as exc:
                raise ValueError(f"union_fs: mount point {exc}") from None
            if parts in self.mounts:
                raise ValueError(f"union_fs: {prefix!r} is mounted twice")
            if not methods_of(fs) - {"shell"}:
                raise ValueError(f"union_fs: the filesystem at {prefix!r} ({name_of(fs)}) has no file methods")
            self.mounts[parts] = fs
        present = set().union(*(methods_of(fs) for fs in self.mounts.values())) - {"shell"}
        for verb in present:  # presence is the capability: only the union's verbs exist on it
            setattr(self, verb, functools.partial(self._call, verb))

    def __repr__(self) -> str:
        return "union_fs({" + ", ".join(f"{join(p)!r}: {name_of(fs)}" for p, fs in self.mounts.items()) + "})"

    def for_session(self, ctx: Any) -> "UnionFS":
        return UnionFS({join(p): session_copy(fs, ctx) for p, fs in self.mounts.items()})

    def bind_skills(self, skills: dict[str, Any]) -> None:
        for fs in self.mounts.values():
            bind_skills(fs, skills)

    def brief(self) -> str:
        lines = []
        for parts, fs in sorted(self.mounts.items()):
            verbs = ", ".join(v for v in FILE_VERBS if v in methods_of(fs))
            about = fs.brief() if callable(getattr(fs, "brief", None)) else ""
            lines.append(f"- {join(parts)}: {about + '; ' if about else ''}{verbs}")
        return "Mounts:\n" + "\n".join(lines)

    def _route(self, parts: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
        best = None
        for prefix in self.mounts:
            if parts[:len(prefix)] == prefix and (best is None or len(prefix) > len(best)):
                best = prefix
        return None if best is None else (best, self.mounts[best])

    def _method(self, fs: Any, verb: str, where: str) -> Callable:
        method = getattr(fs, verb, None)
        if not callable(method):
            raise WorkspaceError(f"{where} does not support {verb} (its filesystem has "
                                 f"{', '.join(sorted(methods_of(fs))) or 'no methods'})")
        return method

    def _below(self, parts: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
        """Mounts strictly below `parts`, outermost first."""
        return sorted(((p, fs) for p, fs in self.mounts.items() if len(p) > len(parts) and p[:len(parts)] == parts),
                      key=lambda item: item[0])

    def _call(self, verb: str, args: BaseModel, **kwargs: Any) -> Any:
        parts = split_path(args.path)
        routed = self._route(parts)
        if verb in ("ls", "glob", "grep"):
            return getattr(self, f"_{verb}")(parts, routed, args)
        if routed is None:
            raise WorkspaceError(f"nothing is mounted at {join(parts)}; mounts: "
                                 f"{', '.join(join(p) for p in sorted(self.mounts))}")
        prefix, fs = routed
        inner = join(parts[len(prefix):])
        method = self._method(fs, verb, join(prefix))
        try:
            return self._rebase(method(args.model_copy(update={"path": inner}), **kwargs), prefix)
        except WorkspaceError as exc:
            if inner != "/" and inner in str(exc):  # say the path as the model named it
                raise WorkspaceError(str(exc).replace(inner, join(parts))) from None
            raise

    @staticmethod
    def _rebase(result: Any, prefix: tuple[str, ...]) -> Any:
        """A mount's answer with its paths as the union names them."""
        def fix(path: str) -> str:
            return join(prefix + split_path(path))

        if isinstance(result, dict):
            result = dict(result)
            if isinstance(result.get("path"), str):
                result["path"] = fix(result["path"])
            if isinstance(result.get("files"), list):
                result["files"] = [fix(p) for p in result["files"]]
            for key in ("matches", "counts"):
                if isinstance(result.get(key), list):
                    result[key] = [{**m, "path": fix(m["path"])} for m in result[key]]
        return result

    def _ls(self, parts, routed, args: LsArgs) -> dict[str, Any]:
        entries: dict[str, dict[str, Any]] = {}
        listed = False
        if routed is not None:
            prefix, fs = routed
            try:
                inner = self._method(fs, "ls", join(prefix))(args.model_copy(update={"path": join(parts[len(prefix):])}))
                entries.update((e["name"], e) for e in inner.get("entries", []))
                listed = True
            except WorkspaceError:
                if not self._below(parts):
                    raise
        for prefix, _ in self._below(parts):  # mount points show as directories
            entries[prefix[len(parts)]] = {"name": prefix[len(parts)], "type": "dir"}
            listed = True
        if not listed:
            raise WorkspaceError(f"no directory {join(parts)}")
        return {"path": join(parts), "entries": [entries[k] for k in sorted(entries)]}

    def _glob(self, parts, routed, args: GlobArgs) -> dict[str, Any]:
        pattern = split_pattern(args.pattern)
        found: list[str] = []
        if routed is not None and callable(getattr(routed[1], "glob", None)):
            prefix, fs = routed
            inner = fs.glob(args.model_copy(update={"path": join(parts[len(prefix):])}))
            found.extend(self._rebase(inner, prefix)["files"])
        for prefix, fs in self._below(parts):
            if not callable(getattr(fs, "glob", None)):
                continue
            everything = self._rebase(fs.glob(GlobArgs(pattern="**", path="/")), prefix)["files"]
            found.extend(p for p in everything if glob_match(pattern, split_path(p)[len(parts):]))
        found = sorted(set(found))
        return {"files": found[:MAX_RESULTS], "truncated": len(found) > MAX_RESULTS}

    def _grep(self, parts, routed, args: GrepArgs) -> dict[str, Any]:
        key = {"content": "matches", "files": "files", "count": "counts"}[args.output_mode]
        merged: list[Any] = []
        truncated = False
        searched = False
        targets = []
        if routed is not None and callable(getattr(routed[1], "grep", None)):
            prefix, fs = routed
            targets.append((prefix, fs, args.model_copy(update={"path": join(parts[len(prefix):])})))
        only = split_pattern(args.glob) if args.glob else None
        for prefix, fs in self._below(parts):
            if callable(getattr(fs, "grep", None)):
                # The glob is relative to the searched path: a mount below it matches what is under the mount.
                targets.append((prefix, fs, args.model_copy(update={"path": "/", "glob": None})))
        for prefix, fs, inner_args in targets:
            searched = True
            result = self._rebase(fs.grep(inner_args), prefix)
            items = result.get(key, [])
            if inner_args.glob is None and only is not None:
                items = [i for i in items if glob_match(only, split_path(i if isinstance(i, str) else i["path"])[len(parts):])]
            merged.extend(items)
            truncated = truncated or bool(result.get("truncated"))
        if not searched:
            raise WorkspaceError(f"nothing under {join(parts)} can be searched with grep")
        if len(merged) > args.max_results:
            merged, truncated = merged[:args.max_results], True
        return {key: merged, "truncated": truncated}


def union_fs(mounts: dict[str, Any]) -> UnionFS:
    """Mount filesystems under absolute prefixes: `union_fs({"/repo": ..., "/notes": memory_fs()})`."""
    return UnionFS(mounts)


def session_copy(fs: Any, ctx: Any) -> Any:
    hook = getattr(fs, "for_session", None)
    return hook(ctx) if callable(hook) else fs


def bind_skills(fs: Any, skills: dict[str, Any]) -> None:
    """Give every skills_fs() in a tree the agent's skills."""
    if isinstance(fs, SkillsFS):
        fs.bind(skills)
    elif isinstance(fs, UnionFS):
        fs.bind_skills(skills)
