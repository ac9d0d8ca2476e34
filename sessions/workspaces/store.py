"""Each session's workspace: built when its first turn starts, reused by every turn, deleted with it.

A local runtime's workspace is a directory under AGENTSITE_WORKSPACES_ROOT
named after the session, materialized once: `AGENTS.md` (the instructions),
`.skills/<name>/SKILL.md` and the skills' files, `.tools/<name>` (a launcher
per `execution="agent"` tool), then the agent's seed files. Files sent with a
message (`workspaceFiles`) are written when its turn starts.

A virtual runtime's workspace is a filesystem object: the agent's own (its
`for_session` copy) or what its factory returns for the session. It lives in
the memory of the worker process that built it, cached by session id.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import stat
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.definitions import Tool
from agents.discovery import LoadedAgent
from agents.workspaces.filesystems import VERBS, WorkspaceError, methods_of, session_copy, split_path
from agents.workspaces.localfs import LocalFS
from agents.workspaces.memoryfs import skill_markdown
from agents.workspaces import disks, sandbox
from agents.workspaces.runtimes import LocalRuntime, SessionContext, narrow
from agents.workspaces.shell import LocalShellFS
from agents.workspaces.tools import workspace_tools
from agents.workspaces.unionfs import bind_skills
from sessions.host import Host
from sessions.workspaces.volume import VolumeNotShared, check_recently

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
VIRTUAL_CACHE_SIZE = 512


class WorkspaceUnavailable(Exception):
    """The session's workspace cannot be built; the turn fails with this message (code workspace_error)."""


@dataclass
class Workspace:
    """One session's workspace: its filesystem and the tools offered over it."""

    kind: str  # "local" | "virtual"
    fs: Any
    offered: frozenset[str]
    loaded: LoadedAgent
    root: Path | None = None  # a local workspace's directory

    def tools(self) -> dict[str, Tool]:
        return workspace_tools(self.offered, self.fs, needs_approval=self.loaded.runtime.needs_approval)

    def brief(self) -> str:
        """The environment brief appended to the system prompt: what this workspace offers."""
        agent_tools = self.loaded.agent_tools() if "shell" in self.offered else {}
        if not self.offered and not agent_tools:
            return ""
        verbs = ", ".join(v for v in VERBS if v in self.offered) or "none"
        if self.kind == "local":
            runtime = self.loaded.runtime
            lines = ["## Workspace",
                     "You have a directory of your own for this conversation; it keeps its files between turns. "
                     "Paths are relative to it: absolute paths and '..' are refused, file tools do not follow "
                     "symbolic links out of it, and they refuse hard links (a file with another name).",
                     f"Workspace tools: {verbs}."]
            if "shell" in self.offered:
                lines.append(f"`shell` runs /bin/sh in the directory with a {runtime.shell_timeout:g} s limit and "
                             f"at most {runtime.output_limit} bytes of output per stream; it gets no secrets of "
                             "the server.")
            lines.append("AGENTS.md holds your instructions" + (
                "; your skills are in .skills/<name>/SKILL.md." if self.loaded.skills else "."))
        else:
            lines = ["## Workspace",
                     "Your workspace is a virtual filesystem rooted at /; there is no shell and no checkout on a host.",
                     f"Workspace tools: {verbs}."]
            about = self.fs.brief() if callable(getattr(self.fs, "brief", None)) else ""
            if about:
                lines.append(about)
        if agent_tools:
            lines.append("Scripts you can run with `shell` (pass the input as one JSON argument, e.g. "
                         "`.tools/<name> '{\"key\": \"value\"}'`; they print their result as JSON):")
            for name, tool in sorted(agent_tools.items()):
                lines.append(f"- .tools/{name}: {tool.description} Input schema: "
                             f"{_compact_json(tool.input_schema())}")
        return "\n".join(lines)


def workspaces_root() -> Path:
    return Path(settings.AGENTSITE_WORKSPACES_ROOT)


def workspace_dir(session_id: str) -> Path:
    if not SESSION_ID.match(session_id):
        raise WorkspaceUnavailable(f"session id {session_id!r} cannot name a workspace directory")
    return workspaces_root() / session_id


# -- building ---------------------------------------------------------------------------

_virtual: OrderedDict[str, Any] = OrderedDict()
_virtual_lock = threading.Lock()


def open_workspace(session: Any, loaded: LoadedAgent, *, files: bool = False) -> Workspace:
    """The session's workspace, built (local: materialized) on first use.

    A local workspace whose agent is offered no workspace tool and no agent
    tool is materialized only when files are sent into it.
    """
    runtime = loaded.runtime
    if isinstance(runtime, LocalRuntime):
        root = workspace_dir(session.id)
        try:
            check_recently()  # never a fresh workspace where the session's files live on another host's disk
        except VolumeNotShared as exc:
            raise WorkspaceUnavailable(str(exc)) from None
        offered = sandbox.host_allows(narrow(runtime.methods(), loaded.allowlist)[0])
        # The directory appears complete or not at all (materialize renames it into place).
        if disks.holds(root):
            _mount(root)
        elif (offered or loaded.agent_tools() or files) and not root.is_dir():
            materialize(root, loaded)
        return Workspace("local", local_fs(root, loaded), offered, loaded, root)
    with _virtual_lock:
        fs = _virtual.get(session.id)
        if fs is not None:
            _virtual.move_to_end(session.id)
    if fs is None:
        fs = build_virtual(loaded, SessionContext(session_id=session.id, agent=loaded.slug,
                                                  principal_id=session.principal_id, channel=session.channel,
                                                  host=Host(session=session, agent=session.agent)))
        with _virtual_lock:
            fs = _virtual.setdefault(session.id, fs)
            while len(_virtual) > VIRTUAL_CACHE_SIZE:
                _virtual.popitem(last=False)
    return Workspace("virtual", fs, virtual_offered(loaded, fs), loaded)


def local_fs(root: Path, loaded: LoadedAgent) -> LocalFS:
    """The files of a local workspace, with `shell` where the runtime has it and the host may run it."""
    runtime = loaded.runtime
    state = sandbox.status()
    if not runtime.shell or not state.offers_shell:
        return LocalFS(root)
    mounts = None
    if state.active:
        readable = [*sandbox.python_paths(), str(Path(settings.BASE_DIR) / "agents")]
        if loaded.agent_tools():
            readable.append(str(loaded.root / "agent" / "tools"))
        mounts = sandbox.Mounts(readable=tuple(readable), network=runtime.network, limits=runtime.limits())
    return LocalShellFS(root, timeout=runtime.shell_timeout, output_limit=runtime.output_limit, env=runtime.env,
                        mounts=mounts)


def build_virtual(loaded: LoadedAgent, ctx: SessionContext) -> Any:
    """A virtual session's filesystem: the factory's answer, or the agent's filesystem's session copy."""
    runtime = loaded.runtime
    if runtime.fs is None:
        return _Empty()
    if not runtime.per_session:
        return session_copy(runtime.fs, ctx)
    try:
        fs = session_copy(runtime.fs(ctx), ctx)  # the factory's mounts bound to the session (host_files_fs())
    except Exception as exc:
        raise WorkspaceUnavailable(f"the agent's virtual_runtime factory failed: {type(exc).__name__}: {exc}") from exc
    if fs is None or (not methods_of(fs) and not isinstance(fs, _Empty)):
        raise WorkspaceUnavailable(f"the agent's virtual_runtime factory returned {fs!r}, not a filesystem")
    bind_skills(fs, loaded.skills)
    virtual_offered(loaded, fs)  # fail closed now rather than on the first call
    return fs


def virtual_offered(loaded: LoadedAgent, fs: Any) -> frozenset[str]:
    offered, missing = narrow(methods_of(fs), loaded.allowlist)
    if missing:
        raise WorkspaceUnavailable(
            f"Agent(tools=...) names {', '.join(repr(m) for m in missing)}, which this session's filesystem "
            f"({fs!r}) does not implement: the workspace cannot honour the allowlist, so the turn is refused")
    return offered


class _Empty:
    """virtual_runtime() with no filesystem: root /, no methods."""

    def __repr__(self) -> str:
        return "empty"


def sessionless_workspace(loaded: LoadedAgent) -> Workspace:
    """The workspace of a direct tool call without a session: only a fixed virtual filesystem has one."""
    runtime = loaded.runtime
    if isinstance(runtime, LocalRuntime) or runtime.per_session:
        raise WorkspaceUnavailable("this agent's workspace belongs to a session: pass a sessionId to call "
                                   "workspace tools")
    fs = build_virtual(loaded, SessionContext(session_id=None, agent=loaded.slug))
    return Workspace("virtual", fs, virtual_offered(loaded, fs), loaded)


def materialize(root: Path, loaded: LoadedAgent) -> None:
    """Write a new local workspace: instructions, skills, agent tool launchers, seeds.

    Built beside its final place and renamed into it, so a workspace is either
    complete or absent; if another process got there first, its copy stays.
    A workspace whose commands run in the sandbox goes on a filesystem of its own
    where this host can make one (`agents.workspaces.disks`): the staging folder
    is copied into the image, and the image mounted at the workspace's place.
    """
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = root.parent / f".{root.name}.{secrets.token_hex(4)}"
    try:
        if loaded.seed_dir is not None:
            shutil.copytree(loaded.seed_dir, staging, symlinks=True)
        staging.mkdir(exist_ok=True)
        (staging / "AGENTS.md").write_text(loaded.instructions.strip() + "\n", encoding="utf-8")
        for skill in loaded.skills.values():
            folder = staging / ".skills" / skill.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "SKILL.md").write_text(skill_markdown(skill), encoding="utf-8")
            for rel, content in skill.files.items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(content, encoding="utf-8")
        if loaded.agent_tools():
            (staging / ".tools").mkdir(exist_ok=True)
            for name in loaded.agent_tools():
                launcher = staging / ".tools" / name
                launcher.write_text(agent_tool_launcher(loaded.root / "agent" / "tools" / f"{name}.py"))
                launcher.chmod(0o755)
        if _on_own_disk(loaded) and not disks.available(root.parent):
            with contextlib.suppress(disks.DiskError):  # logged: the workspace stays a plain directory
                disks.create(root, staging, loaded.runtime.limits().disk)
                return
        try:
            staging.rename(root)
        except OSError:
            if not root.is_dir():  # else another process got there first: its copy stays
                raise
    except OSError as exc:
        raise WorkspaceUnavailable(f"cannot create the session's workspace: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _on_own_disk(loaded: LoadedAgent) -> bool:
    """Whether a workspace of this agent runs sandboxed commands, whose writes its disk limit bounds."""
    return loaded.runtime.shell and sandbox.status().active


def _mount(root: Path) -> None:
    try:
        disks.ensure(root)
    except (disks.DiskError, OSError) as exc:
        raise WorkspaceUnavailable(f"cannot mount the session's workspace: {exc}") from None


def agent_tool_launcher(tool_file: Path) -> str:
    """A script that runs one execution="agent" tool with the server's Python, as the release validated it."""
    return ("#!/bin/sh\n"
            f"PYTHONPATH={shlex.quote(str(settings.BASE_DIR))} "
            f"exec {shlex.quote(sys.executable)} -m agents.agent_tool {shlex.quote(str(tool_file))} \"$@\"\n")


# -- files sent with a message ----------------------------------------------------------

def file_bytes(sent: dict[str, Any]) -> bytes:
    if sent.get("encoding") == "base64":
        return base64.b64decode(sent["content"])
    return sent["content"].encode("utf-8")


def file_record(sent: dict[str, Any]) -> dict[str, Any]:
    """How a sent file is recorded in the event log: its path, size and digest."""
    data = file_bytes(sent)
    return {"path": sent["path"], "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_sent_files(workspace: Workspace, files: list[dict[str, Any]]) -> None:
    """Write a message's workspaceFiles into a local workspace (checked again: they came from outside)."""
    if not files:
        return
    if workspace.kind != "local":
        raise WorkspaceError("this agent's workspace is virtual: files cannot be sent into it")
    fs: LocalFS = workspace.fs
    for sent in files:
        fs.put(sent["path"], file_bytes(sent))


# -- reading and removing -------------------------------------------------------------------

def _existing_dir(session_id: str) -> Path | None:
    """A session's local workspace directory if it exists on this host."""
    try:
        root = workspace_dir(session_id)
    except WorkspaceUnavailable:
        return None
    try:
        disks.ensure(root)
    except (disks.DiskError, OSError) as exc:
        log.warning("cannot mount the workspace of session %s: %s", session_id, exc)
        return None
    return root if root.is_dir() else None


def list_files(session_id: str, limit: int = 500) -> list[dict[str, Any]] | None:
    """The files of a session's local workspace (path, size), or None if it has none on this host.

    A hard link is listed as one, without a size: the file may be outside the workspace (`agents.workspaces.localfs`).
    """
    root = _existing_dir(session_id)
    if root is None:
        return None
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            hardlink = stat.S_ISREG(info.st_mode) and info.st_nlink > 1
            found.append({"path": path.relative_to(root).as_posix(), "bytes": None if hardlink else info.st_size,
                          "symlink": stat.S_ISLNK(info.st_mode), "hardlink": hardlink})
            if len(found) >= limit:
                return found
    return found


def workspace_size(session_id: str) -> int | None:
    """Bytes used by a session's local workspace, or None if it has none on this host.

    Hard links are not counted: their file is shared with another name, perhaps outside the workspace.
    """
    root = _existing_dir(session_id)
    if root is None:
        return None
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if not (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
                total += info.st_size
    return total


def delete_workspace(session_id: str) -> None:
    """Remove a session's workspace: its directory, and this process's virtual filesystem."""
    with _virtual_lock:
        _virtual.pop(session_id, None)
    try:
        root = workspace_dir(session_id)
    except WorkspaceUnavailable:
        return
    if not disks.remove(root):  # logged: its files are left, not deleted through a mount still there
        return
    shutil.rmtree(root, ignore_errors=True)


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def valid_sent_path(path: str) -> str:
    """A workspaceFiles path as stored: relative segments joined by '/'; ValueError says what is wrong."""
    try:
        parts = split_path(path, absolute=False)
    except WorkspaceError as exc:
        raise ValueError(str(exc)) from None
    if not parts:
        raise ValueError(f"path {path!r} names the workspace root, not a file")
    return "/".join(parts)
