"""What loading an agent folder gives: `LoadedAgent` (and its manifest), its subagents, and the
problems that stop it (`AgentFolderError`, each `Problem` naming a file and the fix)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.channels import ChannelHook, LoadedChannel
from agents.definitions import Agent, Tool
from agents.experiments import ABTest
from agents.hooks import Hook
from agents.mcp import McpServer
from agents.schedules import LoadedSchedule
from agents.skills import LoadedSkill
from agents.workspaces.filesystems import VERBS
from agents.workspaces import sandbox
from agents.workspaces.runtimes import DEFAULT_RUNTIME, LocalRuntime, Runtime, offered_at_discovery


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def tool_file(name: str) -> str:
    """The file of an agent's tool, relative to its folder: one tool per file, named by it. (The
    manifest says it as `file`; /info adds each tool's `source` when read, so older releases have it.)"""
    return f"agent/tools/{name}.py"


class AgentFolderError(Exception):
    def __init__(self, root: Path, problems: list[Problem]):
        self.root = root
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class LoadedSubagent:
    id: str
    description: str
    model: str
    params: dict[str, Any]
    instructions: str


@dataclass
class LoadedAgent:
    slug: str
    root: Path
    config: Agent
    model: str
    instructions: str
    tools: dict[str, Tool]
    content_hash: str
    warnings: list[Problem] = field(default_factory=list)
    skills: dict[str, LoadedSkill] = field(default_factory=dict)
    subagents: dict[str, LoadedSubagent] = field(default_factory=dict)
    hooks: list[Hook] = field(default_factory=list)
    schedules: dict[str, LoadedSchedule] = field(default_factory=dict)
    mcp: list[McpServer] = field(default_factory=list)
    runtime: Runtime = DEFAULT_RUNTIME
    seed_dir: Path | None = None
    channels: dict[str, LoadedChannel] = field(default_factory=dict)
    experiments: dict[str, ABTest] = field(default_factory=dict)
    # What a session may be bound to (the first is `model`), fall over to, and message.
    models: list[str] = field(default_factory=list)
    fallback: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    remote_peers: list[dict[str, str]] = field(default_factory=list)
    # The release's (set by load_deployment): the only domains its outbound calls may reach.
    allowed_domains: tuple[str, ...] = ()

    @property
    def allowlist(self) -> tuple[str, ...] | None:
        return None if self.config.tools is None else tuple(self.config.tools)

    def workspace_tools(self) -> frozenset[str] | None:
        """The workspace tools every session is offered on this host; None when a per-session factory decides."""
        offered = offered_at_discovery(self.runtime, self.allowlist)
        return sandbox.host_allows(offered) if isinstance(self.runtime, LocalRuntime) and offered else offered

    def agent_tools(self) -> dict[str, Tool]:
        """Tools the model runs as scripts in its workspace (execution="agent")."""
        return {name: t for name, t in self.tools.items() if t.execution == "agent"}

    def server_tools(self) -> dict[str, Tool]:
        return {name: t for name, t in self.tools.items() if t.execution == "server"}

    def manifest(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "name": self.config.name or self.slug,
            "description": self.config.description,
            "model": self.model,
            # Only when declared: releases of agents with one model keep the manifest they always had.
            **({"models": list(self.models)} if len(self.models) > 1 else {}),
            **({"fallback": list(self.fallback)} if self.fallback else {}),
            **({"peers": list(self.peers)} if self.peers else {}),
            **({"remotePeers": [dict(peer) for peer in self.remote_peers]} if self.remote_peers else {}),
            "params": self.config.params,
            "maxSteps": self.config.max_steps,
            "retentionDays": self.config.retention_days,
            **({"budget": dict(self.config.budget)} if self.config.budget else {}),
            **({"builtins": sorted(set(self.config.builtins))} if self.config.builtins else {}),
            **({"sharedTools": sorted(set(self.config.share_tools))} if self.config.share_tools else {}),
            "instructions": self.instructions,
            "tools": [
                {
                    "name": name,
                    "description": t.description,
                    "effect": t.effect,
                    "needsApproval": t.needs_approval,
                    "directCall": t.direct_call,
                    "timeArgs": list(t.time_args),
                    "execution": t.execution,
                    "family": "server" if t.execution == "server" else "agent",
                    "inputSchema": t.input_schema(),
                    "file": tool_file(name),
                }
                for name, t in sorted(self.tools.items())
            ],
            "skills": [
                {"name": k.name, "description": k.description, "files": sorted(k.files), "source": k.source}
                for k in self.skills.values()
            ],
            "subagents": [
                {"id": a.id, "description": a.description, "model": a.model} for a in self.subagents.values()
            ],
            "hooks": sorted({e for h in self.hooks if not isinstance(h, ChannelHook) for e in h.events}),
            "channels": [c.describe(self.slug) for c in self.channels.values()],
            "schedules": [
                {"id": k.id, "kind": k.kind, "cron": k.cron, "title": k.title, "file": f"agent/schedules/{k.id}.{'md' if k.kind == 'markdown' else 'py'}"}
                for k in self.schedules.values()
            ],
            "remindersTool": self.config.reminders_tool,
            "mcp": [server.describe() for server in self.mcp],
            # Only when there are any: releases without experiments keep the manifest they always had.
            **({"experiments": [test.describe() for test in self.experiments.values()]} if self.experiments else {}),
            "runtime": self.runtime_manifest(),
        }

    def runtime_manifest(self) -> dict[str, Any]:
        offered = self.workspace_tools()
        return {**self.runtime.describe(), "toolsAllowlist": None if self.allowlist is None else list(self.allowlist),
                "workspaceTools": None if offered is None else [v for v in VERBS if v in offered],
                "seedFiles": self.seed_dir is not None}
