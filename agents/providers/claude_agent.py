"""`claude-agent:<model>`: sessions whose turns run on the official Claude Agent SDK.

This is not a provider the own loop calls step by step: the official runtime
runs a whole turn (its model calls, its tool loop) in a child process, and
sessions.claude_agent drives it. What the rest of the server asks of any
model id is answered here, as for `anthropic:` (the runtime calls the same
Messages API): whether it is configured (ANTHROPIC_API_KEY, or
`api_key_env`), where it calls (ANTHROPIC_BASE_URL or the `base_url`
param) and whether that answers. The SDK itself is an optional dependency
(agents.providers.runtimes says whether it is installed).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import ModelEvent, ModelRequest
from agents.providers.claude_agent_names import on_the_wire, wire_name


class ClaudeAgentRuntime(AnthropicProvider):
    name = "claude-agent"
    # Runs whole turns: sessions.turn.engine hands such a session's turns to this runtime's leg.
    runtime = "claude-agent"

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        """One call to the runtime's model with the conversation as the runtime would send it (its tools
        named as it calls them): what a handoff to such a session confirms before it moves. The runtime
        runs whole turns, so this is never a step of another loop (a fallback or a subagent: deploy
        refuses both)."""
        wire = replace(request, messages=on_the_wire(request.messages),
                       tools=[replace(tool, name=wire_name(tool.name)) for tool in request.tools])
        yield from super().stream(wire)
