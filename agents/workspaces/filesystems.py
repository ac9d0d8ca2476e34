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

The filesystems: `memory_fs` (a dict of files, in the process's memory) and
`skills_fs` (the agent's skills, read-only) in `memoryfs`, `union_fs` (mounts
under prefixes, routed by longest prefix) in `unionfs`, the directory of a
local runtime in `localfs`, the agent's file store in `host_files`.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any, Iterable, Literal

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
    # A misspelt argument is an error the model can correct, not a silently ignored key. Each validator
    # is built when its tool is first called, not in every process that imports the tools.
    model_config = ConfigDict(extra="forbid", defer_build=True)


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


def session_copy(fs: Any, ctx: Any) -> Any:
    hook = getattr(fs, "for_session", None)
    return hook(ctx) if callable(hook) else fs
