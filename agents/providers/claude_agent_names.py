"""How the Claude Agent SDK's runtime names tools, beside how the stored conversation does.

The agent's tools reach the runtime as the in-process MCP server `agent`,
so the runtime (and the model behind it) calls them `mcp__agent__<name>`;
the runtime's own tools keep their names (Read, Write, Edit, Bash, Skill,
and its subagent tool, offered as Task and called Agent). The stored
conversation names every call as agentsite does: the agent's tools by their
own names, the runtime's by theirs. `natives` says which of a release's
parts the runtime does with tools of its own. Light on purpose: no SDK is
imported.
"""
from __future__ import annotations

from typing import Any

SERVER = "agent"
PREFIX = f"mcp__{SERVER}__"
# Providers whose models the runtime runs (a subagent on one is the runtime's own).
ANTHROPIC = ("anthropic", "claude-agent")
# The runtime's own tools that a session may be offered (sessions.claude_agent.builtins).
RUNTIME_TOOLS = frozenset({"Read", "Write", "Edit", "Bash", "Skill", "Task", "Agent"})


def wire_name(tool: str) -> str:
    """A stored call's tool as the runtime calls it."""
    return tool if tool in RUNTIME_TOOLS else PREFIX + tool


def agent_tool(name: str) -> str:
    """The agent's name of a tool as the runtime calls it; "" for one of the runtime's own."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else ""


def stored_name(name: str) -> str:
    """A tool as the runtime called it, as the stored conversation names it."""
    return agent_tool(name) or name


def on_the_wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with each call's tool named as the runtime calls it (a new list)."""
    out = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("toolCalls"):
            message = {**message, "toolCalls": [{**c, "name": wire_name(c["name"])} for c in message["toolCalls"]]}
        elif message.get("role") == "tool" and message.get("name"):
            message = {**message, "name": wire_name(message["name"])}
        out.append(message)
    return out


def natives(loaded: Any) -> frozenset[str]:
    """What of the release the runtime does with its own tools: its skills always (`skills`, the Skill
    tool), and its subagents (`subagents`, the Agent tool) when every one is on one of Anthropic's
    models, which the runtime can run; otherwise agentsite's `delegate` runs them on the own loop."""
    parts = {"skills"} if loaded.skills else set()
    if loaded.subagents and all(sub.model.partition(":")[0] in ANTHROPIC for sub in loaded.subagents.values()):
        parts.add("subagents")
    return frozenset(parts)
