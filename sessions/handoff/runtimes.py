"""What a handoff between agent runtimes changes: agentsite's loop and the Claude Agent SDK's runtime.

Both keep one stored conversation, so it all carries over; what differs is
the tools each runtime offers under which names. A call of a tool the
target does not offer by that name stays in the history, and its model
cannot make it again; the agent's own tools are offered by both, under the
MCP server's names on the runtime. Signed thinking is dropped as in any
handoff (the model id changes).
"""
from __future__ import annotations

from typing import Any

from agents.providers.claude_agent_names import PREFIX, RUNTIME_TOOLS
from agents.providers.runtimes import LABELS, runtime_name

# agentsite's built-ins and workspace verbs the runtime's own tools stand in for (sessions.claude_agent.builtins).
STOOD_IN_FOR = frozenset({"load_skill", "delegate", "read", "write", "edit", "shell"})


def across_runtimes(conversation: list[dict[str, Any]], source: str, target: str
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(lost, transformed) entries of a review moving from `source`'s runtime to `target`'s."""
    if runtime_name(source) == runtime_name(target):
        return [], []
    calls = [call["name"] for message in conversation if message.get("role") == "assistant"
             for call in message.get("toolCalls") or []]
    to_runtime = runtime_name(target) != "agentsite"
    stranded = sorted({name for name in calls if name in (STOOD_IN_FOR if to_runtime else RUNTIME_TOOLS)})
    count = sum(name in stranded for name in calls)
    lost, transformed = [], []
    if stranded:
        lost.append({"kind": "runtimeTools", "count": count, "detail": (
            f"{count} call(s) of {', '.join(stranded)} stay in the history, but {LABELS[runtime_name(target)]} "
            "offers no tool of that name" + (" (its own tools stand in for them)" if to_runtime else "") +
            ": the model cannot make them again")})
    if to_runtime:
        renamed = sum(name not in RUNTIME_TOOLS for name in calls)
        if renamed:
            transformed.append({"kind": "toolNames", "count": renamed, "detail": (
                f"{renamed} call(s) of the agent's tools are shown to the runtime under its MCP server's names "
                f"({PREFIX}<tool>); the stored conversation keeps the agent's")})
    return lost, transformed
