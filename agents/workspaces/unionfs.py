"""`union_fs`: filesystems mounted under prefixes, and binding the agent's skills into a tree."""
from __future__ import annotations

import functools
from typing import Any, Callable

from pydantic import BaseModel

from agents.workspaces.filesystems import (
    FILE_VERBS,
    MAX_RESULTS,
    GlobArgs,
    GrepArgs,
    LsArgs,
    WorkspaceError,
    glob_match,
    join,
    methods_of,
    name_of,
    session_copy,
    split_path,
    split_pattern,
)
from agents.workspaces.memoryfs import SkillsFS


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


def bind_skills(fs: Any, skills: dict[str, Any]) -> None:
    """Give every skills_fs() in a tree the agent's skills."""
    if isinstance(fs, SkillsFS):
        fs.bind(skills)
    elif isinstance(fs, UnionFS):
        fs.bind_skills(skills)
