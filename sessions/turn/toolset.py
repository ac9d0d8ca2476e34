"""The tools a turn's model is offered, by family.

- `server`: the agent's own tools (`agent/tools/<name>.py`), run in the worker;
- `workspace`: read, ls, glob, grep, write, edit, delete, shell, exactly those the
  session's workspace implements and `Agent(tools=...)` allows;
- `builtin`: load_skill, read_skill_file, delegate, remind_me, cancel_reminder, and
  list_agents, send_message, read_notifications for an agent with peers.

Each tool's `source` says where it comes from, for /info: `{"kind": "file", "path":
"agent/tools/<name>.py"}`, `{"kind": "mcp", "server": name}` (a tool with a `source()` of
its own) or `{"kind": "builtin", "feature": "workspace" | "skills" | "subagents" | ...}`.

`execution="agent"` tools are not offered as tools: the model runs them as
scripts with `shell` (the workspace brief lists them); they stay callable by
name only to be refused with that explanation.
- `mcp`: the tools of the agent's MCP servers, `<server>__<tool>` (sessions.mcp.tools),
  a family that feature registers (sessions.turn.extensions); any other registered family
  comes after it the same way.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from agents.definitions import Tool
from agents.discovery import LoadedAgent, load_deployment, tool_file
from agents.models import Deployment
from agents.secrets.store import acting_for
from agents.workspaces.filesystems import VERBS
from agents.workspaces.tools import workspace_tools
from sessions.turn import extensions
from sessions.turn.builtins import builtin_features, builtin_tools
from sessions.workspaces.store import Workspace

log = logging.getLogger(__name__)

FAMILIES = ("server", "workspace", "builtin", "agent", "mcp")


@dataclass(frozen=True)
class Toolset:
    tools: dict[str, Tool]  # every name a call may use
    families: dict[str, str]
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def offered(self) -> dict[str, Tool]:
        """What the model is shown: all but the agent tools (scripts it runs with shell)."""
        return {name: t for name, t in self.tools.items() if self.families[name] != "agent"}

    def describe(self) -> list[dict[str, Any]]:
        """The offered tools as /info lists them."""
        return [{"name": name, "family": self.families[name], "source": self.sources.get(name, {}),
                 "description": t.description, "effect": t.effect,
                 "needsApproval": t.needs_approval, "inputSchema": t.input_schema()}
                for name, t in sorted(self.offered().items())]


def toolset(loaded: LoadedAgent, workspace: Workspace | None,
            delegate: Callable[[str, str, str], str] | None) -> Toolset:
    """The session's tools: built-ins, the agent's tools, the workspace's tools.

    `workspace` None: the tools every session of the agent is offered, without a
    filesystem behind them (for /info); a per-session factory's are left out.
    """
    tools: dict[str, Tool] = {}
    families: dict[str, str] = {}
    sources: dict[str, dict[str, str]] = {}
    features = builtin_features(loaded)
    for name, tool in builtin_tools(loaded, delegate).items():
        tools[name], families[name] = tool, "builtin"
        sources[name] = {"kind": "builtin", "feature": features.get(name, "engine")}
    for name, tool in loaded.tools.items():
        tools[name], families[name] = tool, "server" if tool.execution == "server" else "agent"
        sources[name] = {"kind": "file", "path": tool_file(name)}
    if workspace is not None:
        found = workspace.tools()
    else:
        offered = loaded.workspace_tools() or frozenset()
        found = workspace_tools([v for v in VERBS if v in offered], None,
                                needs_approval=loaded.runtime.needs_approval)
    for name, tool in found.items():
        tools[name], families[name] = tool, "workspace"
        sources[name] = {"kind": "builtin", "feature": "workspace"}
    for family, source in extensions.tool_families:
        for name, tool in source(loaded).items():
            if name not in tools:  # a server tool of the same name was there first
                tools[name], families[name] = tool, family
                own = getattr(tool, "source", None)
                sources[name] = own() if callable(own) else {"kind": family}
    return Toolset(tools, families, sources)


def declared_tools(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a release declares, as /info lists them: each with its source (a manifest names
    only the file; releases deployed before `file` existed have neither)."""
    return [{**t, "source": {"kind": "file", "path": t.get("file") or tool_file(t["name"])}}
            for t in manifest.get("tools", [])]


def offered_tools(deployment: Deployment | None) -> list[dict[str, Any]]:
    """Every tool the model is offered in a session of this release (a per-session factory's
    workspace tools are known only in the session), each with its family, source and input schema."""
    if deployment is None:
        return []
    try:
        loaded = load_deployment(deployment)
    except Exception:  # a release that no longer loads still has its manifest
        log.exception("cannot load %s for its tools", deployment)
        return [{**t, "family": t.get("family", "server")} for t in declared_tools(deployment.manifest)
                if t.get("execution", "server") == "server"]
    with acting_for(deployment.agent.slug):  # the MCP servers' credentials are the agent's (an OAuth token too)
        return toolset(loaded, None, delegate=_not_run).describe()


def _not_run(subagent: str, task: str, call_id: str) -> str:
    raise RuntimeError("listing only")
