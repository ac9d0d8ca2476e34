"""Runtimes: where a turn's file and shell tools act (`Agent(runtime=...)`).

- `local_runtime()` (the default): a directory of its own for each session under
  the state root; every file verb and `shell` act on that one tree.
- `virtual_runtime(fs)`: the same agent loop against a filesystem object
  (`memory_fs`, `union_fs`, `skills_fs`, or your own, see agents.workspaces.filesystems);
  nothing on the host. `virtual_runtime()` alone is an empty tree with no
  methods, so no workspace tools. `virtual_runtime(lambda ctx: ...)` builds
  each session's filesystem when its first turn starts.

The workspace tools offered to the model are exactly the verbs the workspace
implements; `Agent(tools=[...])` may only narrow them. `narrow` is that rule,
used at discovery (a fixed filesystem) and when a session's workspace is built
(a per-session factory).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from agents.workspaces.filesystems import FILE_VERBS, VERBS, methods_of, name_of
from agents.workspaces.sandbox import MiB, Limits

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_SHELL_TIMEOUT = 3600.0


@dataclass(frozen=True)
class SessionContext:
    """What a per-session factory gets: `virtual_runtime(lambda ctx: ...)`."""

    session_id: str | None
    agent: str
    principal_id: str = ""
    channel: str = ""
    # The host services tools get as `ctx.host` (reminders, and what the server adds), for
    # filesystems backed by them; None without a session.
    host: Any = None


@dataclass(frozen=True)
class LocalRuntime:
    kind = "local"
    shell: bool = True
    shell_timeout: float = 30.0
    output_limit: int = 64 * 1024
    env: dict[str, str] = field(default_factory=dict)
    needs_approval: tuple[str, ...] = ()
    network: bool = False
    process_limit: int = Limits.processes
    memory_limit: int = Limits.memory
    disk_limit: int = Limits.disk

    def methods(self) -> frozenset[str]:
        return frozenset(FILE_VERBS) | ({"shell"} if self.shell else set())

    def limits(self) -> Limits:
        # Per process, CPU time cannot usefully exceed the wall-clock limit on two cores.
        return Limits(processes=self.process_limit, memory=self.memory_limit, disk=self.disk_limit,
                      cpu_seconds=int(self.shell_timeout * 2) + 1)

    def problems(self) -> list[str]:
        found = []
        if not isinstance(self.shell, bool):
            found.append(f"local_runtime(shell=...) must be True or False, not {self.shell!r}")
        if not isinstance(self.shell_timeout, int | float) or not 0 < self.shell_timeout <= MAX_SHELL_TIMEOUT:
            found.append(f"local_runtime(shell_timeout=...) must be seconds between 0 and {MAX_SHELL_TIMEOUT:g}")
        if not isinstance(self.output_limit, int) or not 1024 <= self.output_limit <= 16 * 1024 * 1024:
            found.append("local_runtime(output_limit=...) must be bytes between 1024 and 16 MiB")
        if not isinstance(self.network, bool):
            found.append(f"local_runtime(network=...) must be True or False, not {self.network!r}")
        for name, value, low, high, unit in (
                ("process_limit", self.process_limit, 8, 4096, "processes"),
                ("memory_limit", self.memory_limit, 64 * MiB, 64 * 1024 * MiB, "bytes"),
                ("disk_limit", self.disk_limit, 1 * MiB, 1024 * 1024 * MiB, "bytes")):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                found.append(f"local_runtime({name}=...) must be {unit} between {low} and {high}")
        if not isinstance(self.env, dict):
            found.append("local_runtime(env=...) must be a dict of names to text")
        else:
            for name, value in self.env.items():
                if not isinstance(name, str) or not ENV_NAME.match(name) or not isinstance(value, str):
                    found.append(f"local_runtime(env=...): {name!r} must be a variable name mapped to text")
        return found

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "shell": self.shell, "shellTimeoutSeconds": self.shell_timeout,
                "outputLimitBytes": self.output_limit, "env": sorted(self.env) if isinstance(self.env, dict) else [],
                "needsApproval": sorted(self.needs_approval), "network": self.network,
                "limits": self.limits().describe()}

    def __repr__(self) -> str:
        return "local_runtime()" if self == LocalRuntime() else "local_runtime(...)"


@dataclass(frozen=True)
class VirtualRuntime:
    kind = "virtual"
    fs: Any = None
    needs_approval: tuple[str, ...] = ()

    @property
    def per_session(self) -> bool:
        """Whether `fs` is a factory the session's first turn calls."""
        return callable(self.fs) and not methods_of(self.fs)

    def methods(self) -> frozenset[str] | None:
        """The filesystem's verbs; None while unknown (a per-session factory)."""
        if self.fs is None:
            return frozenset()
        if self.per_session:
            return None
        return methods_of(self.fs)

    def problems(self) -> list[str]:
        if self.fs is not None and not self.per_session and not methods_of(self.fs) and not callable(self.fs):
            return [f"virtual_runtime() takes a filesystem (memory_fs, union_fs, ...) or a function of the session "
                    f"that returns one, not {self.fs!r}"]
        return []

    def describe(self) -> dict[str, Any]:
        return {"kind": "virtual", "perSession": self.per_session,
                "filesystem": None if self.fs is None else "per-session factory" if self.per_session else name_of(self.fs),
                "needsApproval": sorted(self.needs_approval)}

    def __repr__(self) -> str:
        return "virtual_runtime(...)"


Runtime = LocalRuntime | VirtualRuntime


def local_runtime(*, shell: bool = True, shell_timeout: float = 30.0, output_limit: int = 64 * 1024,
                  env: dict[str, str] | None = None, needs_approval: Iterable[str] = (), network: bool = False,
                  process_limit: int = Limits.processes, memory_limit: int = Limits.memory,
                  disk_limit: int = Limits.disk) -> LocalRuntime:
    """A directory per session under the state root, with every file verb and `shell`.

    `shell=False` leaves `shell` out. `shell_timeout` (seconds) and `output_limit`
    (bytes per stream) bound each command; `env` adds variables to the shell's
    allowlisted environment (nothing of the server's is passed on).
    `needs_approval` names workspace tools whose calls wait for a person's decision.
    Commands run in the sandbox: without network unless `network=True`, with at
    most `process_limit` processes, `memory_limit` bytes of address space each,
    and a workspace of at most `disk_limit` bytes.
    """
    return LocalRuntime(shell=shell, shell_timeout=shell_timeout, output_limit=output_limit, env=dict(env or {}),
                        needs_approval=tuple(needs_approval), network=network, process_limit=process_limit,
                        memory_limit=memory_limit, disk_limit=disk_limit)


def virtual_runtime(fs: Any = None, *, needs_approval: Iterable[str] = ()) -> VirtualRuntime:
    """The agent's workspace is `fs`, a filesystem object, or a function `fs(ctx)` that
    builds each session's filesystem when its first turn starts (`ctx`: SessionContext)."""
    return VirtualRuntime(fs=fs, needs_approval=tuple(needs_approval))


DEFAULT_RUNTIME = LocalRuntime()


def narrow(methods: frozenset[str], allowlist: Iterable[str] | None) -> tuple[frozenset[str], list[str]]:
    """The workspace tools offered, and the allowlisted names the workspace cannot honour.

    No allowlist: every verb the workspace has. `edit` in the allowlist names
    the editing envelope: satisfied by `write` or `edit`, and offers whichever
    of the two the workspace has.
    """
    if allowlist is None:
        return frozenset(methods), []
    offered, missing = set(), []
    for name in allowlist:
        if name == "edit":
            granted = methods & {"write", "edit"}
        else:
            granted = methods & {name}
        if not granted:
            missing.append(name)
        offered |= granted
    return frozenset(offered), missing


def allowlist_problems(runtime: Runtime, allowlist: Any) -> list[str]:
    """What is wrong with `Agent(tools=...)` on this runtime, for discovery."""
    if allowlist is None:
        return []
    if isinstance(allowlist, str) or not isinstance(allowlist, list | tuple):
        return [f"tools must be a list of workspace tool names, e.g. tools=['read', 'ls'], not {allowlist!r}"]
    problems = []
    for name in allowlist:
        if name not in VERBS:
            problems.append(f"tools names {name!r}, which is not a workspace tool ({', '.join(VERBS)}): "
                            "the allowlist only narrows the workspace's tools (server tools are the files in "
                            "agent/tools/)")
    methods = runtime.methods()
    if methods is not None and not problems:
        _, missing = narrow(methods, allowlist)
        for name in missing:
            what = "write or edit" if name == "edit" else name
            problems.append(f"tools names {name!r}, but this agent's workspace ({describe_fs(runtime)}) has no "
                            f"{what}: remove it from tools, or give the workspace a filesystem that implements it")
    return problems


def describe_fs(runtime: Runtime) -> str:
    if isinstance(runtime, LocalRuntime):
        return repr(runtime)
    return f"virtual_runtime({'' if runtime.fs is None else name_of(runtime.fs)})"


def offered_at_discovery(runtime: Runtime, allowlist: Iterable[str] | None) -> frozenset[str] | None:
    """The workspace tools every session of the agent is offered; None when a factory decides per session."""
    methods = runtime.methods()
    if methods is None:
        return None
    return narrow(methods, allowlist)[0]


def could_offer(runtime: Runtime, allowlist: Iterable[str] | None) -> frozenset[str]:
    """Every workspace tool some session could be offered (a factory's: all the allowlist permits)."""
    known = offered_at_discovery(runtime, allowlist)
    if known is not None:
        return known
    if allowlist is None:
        return frozenset(VERBS)
    return narrow(frozenset(VERBS), allowlist)[0]
