"""The tools a turn's model is offered, by family.

- `server`: the agent's own tools (`agent/tools/<name>.py`), run in the worker;
- `workspace`: read, ls, glob, grep, write, edit, delete, shell, exactly those the
  session's workspace implements and `Agent(tools=...)` allows;
- `builtin`: load_skill, read_skill_file, delegate, remind_me, cancel_reminder, and
  list_agents, send_message, read_notifications for an agent with peers.

`execution="agent"` tools are not offered as tools: the model runs them as
scripts with `shell` (the workspace brief lists them); they stay callable by
name only to be refused with that explanation.
- `mcp`: the tools of the agent's MCP servers, `<server>__<tool>` (sessions.mcp.tools),
  a family that feature registers (sessions.turn.extensions); any other registered family
  comes after it the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from agents.definitions import Tool
from agents.discovery import LoadedAgent
from agents.workspaces.filesystems import VERBS
from agents.workspaces.tools import workspace_tools
from sessions.turn import extensions
from sessions.turn.builtins import builtin_tools
from sessions.workspaces.store import Workspace

FAMILIES = ("server", "workspace", "builtin", "agent", "mcp")


@dataclass(frozen=True)
class Toolset:
    tools: dict[str, Tool]  # every name a call may use
    families: dict[str, str]

    def offered(self) -> dict[str, Tool]:
        """What the model is shown: all but the agent tools (scripts it runs with shell)."""
        return {name: t for name, t in self.tools.items() if self.families[name] != "agent"}

    def describe(self) -> list[dict[str, Any]]:
        """The offered tools as /info lists them."""
        return [{"name": name, "family": self.families[name], "description": t.description, "effect": t.effect,
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
    for name, tool in builtin_tools(loaded, delegate).items():
        tools[name], families[name] = tool, "builtin"
    for name, tool in loaded.tools.items():
        tools[name], families[name] = tool, "server" if tool.execution == "server" else "agent"
    if workspace is not None:
        found = workspace.tools()
    else:
        offered = loaded.workspace_tools() or frozenset()
        found = workspace_tools([v for v in VERBS if v in offered], None,
                                needs_approval=loaded.runtime.needs_approval)
    for name, tool in found.items():
        tools[name], families[name] = tool, "workspace"
    for family, source in extensions.tool_families:
        for name, tool in source(loaded).items():
            if name not in tools:  # a server tool of the same name was there first
                tools[name], families[name] = tool, family
    return Toolset(tools, families)
