"""The runtime's own tools: for the release's skills and subagents, and the workspace verbs declared.

The release's skills are the runtime's own (its Skill tool reads them from
the run home), and so are its subagents when the runtime can run their
models (its Agent tool, in place of `delegate`). A declared workspace verb
the runtime has a tool of its own for is offered as that tool (`read` as
Read, `write` as Write, `edit` as Edit, `shell` as Bash) in place of
agentsite's; the others (ls, glob, grep, delete) stay agentsite's, offered
through the MCP server like the agent's own tools. The runtime's tools run
in its sandbox (sessions.claude_agent.home), so they reach the session's
workspace and nothing else; on a host whose sandbox cannot start, none of
the workspace's is offered, and every declared verb is agentsite's.

Each call is a ToolCall row and an action like any other: stored and
announced when the runtime asks about it, waiting for approval when its
verb is gated (the runtime defers it, and asks again once decided), and
ended with the result the runtime hands the model.
"""
from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from agents.workspaces import sandbox
from sessions.eventlog.storable import clean_text
from sessions.models import EventType, ToolCall
from sessions.turn.runner import Emitter
from sessions.turn.tools import json_safe, result_payload
from sessions.workspaces.store import Workspace

# A workspace verb, and the runtime's tool that does its work.
RUNTIME_TOOLS = {"read": "Read", "write": "Write", "edit": "Edit", "shell": "Bash"}
WRITES = frozenset({"Write", "Edit", "Bash"})
# The runtime's tools for the release's skills and subagents, and agentsite's built-ins they stand in for.
# (The runtime offers its subagent tool as Task and calls it Agent.)
NATIVE_TOOLS = {"skills": {"Skill": "load_skill"}, "subagents": {"Task": "delegate", "Agent": "delegate"}}


def offered(workspace: Workspace, natives: frozenset[str]) -> dict[str, str]:
    """The runtime's tools this session is offered, each with agentsite's tool it stands for."""
    tools = {name: stands_for for part in natives for name, stands_for in NATIVE_TOOLS[part].items()}
    if workspace.kind == "local" and (sandbox.status().active or sandbox.mode() == "off"):
        tools.update({tool: verb for verb, tool in RUNTIME_TOOLS.items() if verb in workspace.offered})
    return tools


class Builtins:
    def __init__(self, workspace: Workspace, natives: frozenset[str], turn, emitter: Emitter, dry_run: bool):
        self.tools = offered(workspace, natives)
        self.gated = set(workspace.loaded.runtime.needs_approval)
        self.turn = turn
        self.emitter = emitter
        self.dry_run = dry_run
        self.started: dict[str, float] = {}

    def offered(self) -> list[str]:
        """The names the runtime is given (its subagent tool once, by the name it is offered under)."""
        return [name for name in self.tools if name != "Agent"]

    def stands_for(self) -> set[str]:
        """agentsite's tools the runtime's own stand in for (not offered again through the MCP server)."""
        return set(self.tools.values())

    def permit(self, call_id: str, name: str, input: Any) -> tuple[str, str]:
        row = ToolCall.objects.filter(turn=self.turn, call_id=call_id).first()
        if row is None:
            verb = self.tools[name]
            status = ToolCall.Status.AWAITING_APPROVAL if verb in self.gated else ToolCall.Status.REQUESTED
            if self.dry_run and name in WRITES:
                status = ToolCall.Status.FAILED
            shown = json_safe(input)
            with transaction.atomic():
                row = ToolCall.objects.create(
                    session_id=self.turn.session_id, turn=self.turn, call_id=clean_text(call_id), tool=name,
                    input=shown if isinstance(shown, dict) else {"raw": shown}, status=status,
                    error="not run: a dry run changes nothing" if status == ToolCall.Status.FAILED else "")
                family = "workspace" if verb in RUNTIME_TOOLS else "builtin"
                requested = {"callId": row.call_id, "toolName": name, "input": row.input, "family": family}
                self.emitter.emit(EventType.ACTIONS_REQUESTED, {"calls": [requested]})
                if status == ToolCall.Status.AWAITING_APPROVAL:
                    self.emitter.emit(EventType.ACTION_APPROVAL_REQUESTED, {
                        **requested, "description": f"the runtime's {name} tool ({verb} in the workspace)",
                        "effect": "write" if name in WRITES else "read"})
            self.emitter.flush()
        if row.status == ToolCall.Status.AWAITING_APPROVAL:
            return "defer", "waiting for a person's approval"
        if row.status in (ToolCall.Status.REQUESTED, ToolCall.Status.APPROVED) and row.start():
            self.started[row.call_id] = time.monotonic()
            if self.tools[name] == "delegate":
                self.emitter.emit(EventType.SUBAGENT_CALLED, {"subagent": _subagent(row.input),
                                                              "task": str(row.input.get("prompt", ""))})
                self.emitter.flush()
            return "allow", ""
        if row.status == ToolCall.Status.DENIED:
            row.explain_denial("; do not retry this call")
        self.report(row, 0.0)
        return "deny", row.error or "not run"

    def finished(self, call_id: str, content: str, is_error: bool) -> None:
        """The runtime ran the call: its row ends with what the model is handed."""
        if call_id not in self.started:
            return
        row = ToolCall.objects.get(turn=self.turn, call_id=call_id)
        if not (row.fail(content) if is_error else row.succeed(content)):
            return
        duration_ms = (time.monotonic() - self.started.pop(call_id)) * 1000
        if self.tools[row.tool] == "delegate":  # as the own loop's delegate reports its subagent's end
            self.emitter.emit(EventType.SUBAGENT_COMPLETED, {
                "subagent": _subagent(row.input), "reply": "" if is_error else content,
                "error": content if is_error else None, "usage": None, "durationMs": round(duration_ms, 1)})
        self.report(row, duration_ms)

    def report(self, row: ToolCall, duration_ms: float) -> None:
        self.emitter.emit(EventType.ACTION_RESULT, result_payload(row, duration_ms))
        self.emitter.flush()


def _subagent(call_input: dict[str, Any]) -> str:
    return str(call_input.get("subagent_type", ""))
