"""The runtime's own tools: for the release's skills and subagents, and the workspace verbs declared.

The release's skills are the runtime's own (its Skill tool reads them from
the run home), and so are its subagents when the runtime can run their
models (its Agent tool, in place of `delegate`). A declared workspace verb
the runtime has a tool of its own for is offered as that tool (`read` as
Read, `write` as Write, `edit` as Edit, `shell` as Bash) in place of
agentsite's; the others (ls, glob, grep, delete) stay agentsite's, offered
through the MCP server like the agent's own tools. The runtime's tools run
in its sandbox (sessions.claude_agent.home), so they reach the session's
workspace and nothing else; where the sandbox does not run (off, or a host
that cannot start it) none of the workspace's is offered, and every declared
verb is agentsite's, which keeps to the workspace by itself.

Each call is a ToolCall row and an action like any other: stored and
announced when the runtime asks about it, waiting for approval when its
verb is gated (the runtime defers it, and asks again once decided), and
ended with the result the runtime hands the model.
"""
from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from agents.providers.claude_agent_names import PREFIX
from agents.workspaces import sandbox
from agents.workspaces.filesystems import VERBS
from sessions.eventlog.storable import clean_text
from sessions.models import EventType, ToolCall
from sessions.turn.runner import Emitter
from sessions.turn.tools import approval_requested, json_safe, result_payload
from sessions.workspaces.store import Workspace

# A workspace verb, and the runtime's tool that does its work.
RUNTIME_TOOLS = {"read": "Read", "write": "Write", "edit": "Edit", "shell": "Bash"}
WRITES = frozenset({"Write", "Edit", "Bash"})
SUBAGENT_CANNOT_ASK = "this tool needs approval, which a subagent cannot ask for: leave it to the parent"
# The runtime's tools for the release's skills and subagents, and agentsite's built-ins they stand in for.
# (The runtime offers its subagent tool as Task and calls it Agent.)
NATIVE_TOOLS = {"skills": {"Skill": "load_skill"}, "subagents": {"Task": "delegate", "Agent": "delegate"}}


def offered(workspace: Workspace, natives: frozenset[str]) -> dict[str, str]:
    """The runtime's tools this session is offered, each with agentsite's tool it stands for."""
    tools = {name: stands_for for part in natives for name, stands_for in NATIVE_TOOLS[part].items()}
    if workspace.kind == "local" and sandbox.status().active:  # their only bounds are the sandbox's
        tools.update({tool: verb for verb, tool in RUNTIME_TOOLS.items() if verb in workspace.offered})
    return tools


def brief(workspace: Workspace, tools: dict[str, str]) -> str:
    """The workspace brief appended to the runtime's system prompt, naming the tools it has for it."""
    own = [name for name, verb in tools.items() if verb in RUNTIME_TOOLS]
    others = [f"{PREFIX}{verb}" for verb in VERBS if verb in workspace.offered and verb not in tools.values()]
    if not own and not others:
        return ""
    if workspace.kind != "local":
        lines = ["## Workspace", "Your workspace is a virtual filesystem rooted at /; there is no shell."]
    else:
        lines = ["## Workspace", "Your working directory is yours for this conversation; it keeps its files between "
                 "turns, and nothing outside it is reachable."]
    if own:
        lines.append(f"Your tools for it: {', '.join(own)}.")
        if "Bash" in own:
            runtime = workspace.loaded.runtime
            network = "with" if runtime.network else "without"
            lines.append(f"Bash commands run {network} network, for at most {runtime.shell_timeout:g} s each.")
    if others:
        lines.append(f"More tools for it: {', '.join(others)}.")
    return "\n\n" + "\n".join(lines)


class Builtins:
    def __init__(self, workspace: Workspace, natives: frozenset[str], turn, emitter: Emitter, dry_run: bool):
        self.tools = offered(workspace, natives)
        self.subagents = set(workspace.loaded.subagents)
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

    def permit(self, call_id: str, name: str, input: Any, *, in_subagent: bool = False) -> tuple[str, str]:
        row = ToolCall.objects.filter(turn=self.turn, call_id=call_id).first()
        if row is None:
            verb = self.tools[name]
            status, error = ToolCall.Status.REQUESTED, ""
            if verb in self.gated:
                status = ToolCall.Status.AWAITING_APPROVAL
                if in_subagent:
                    status, error = ToolCall.Status.FAILED, SUBAGENT_CANNOT_ASK
            if self.dry_run and name in WRITES:
                status, error = ToolCall.Status.FAILED, "not run: a dry run changes nothing"
            if verb == "delegate" and _subagent(input) not in self.subagents:
                status, error = ToolCall.Status.FAILED, (
                    f"no subagent {_subagent(input)!r}: this agent has {', '.join(sorted(self.subagents))}")
            shown = json_safe(input)
            with transaction.atomic():
                row = ToolCall.objects.create(
                    session_id=self.turn.session_id, turn=self.turn, call_id=clean_text(call_id), tool=name,
                    input=shown if isinstance(shown, dict) else {"raw": shown}, status=status, error=error)
                family = "workspace" if verb in RUNTIME_TOOLS else "builtin"
                announce(self.emitter, row, {"callId": row.call_id, "toolName": name, "input": row.input,
                                             "family": family},
                         f"the runtime's {name} tool ({verb} in the workspace)", "write" if name in WRITES else "read")
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

    def end_unfinished(self) -> None:
        """Calls the runtime started but never told the result of (its run broke off): ended as interrupted."""
        for call_id, started in list(self.started.items()):
            row = ToolCall.objects.filter(turn=self.turn, call_id=call_id).first()
            if row is not None and row.abandon("interrupted: the runtime stopped before the call ended"):
                self.report(row, (time.monotonic() - started) * 1000)
        self.started.clear()

    def report(self, row: ToolCall, duration_ms: float) -> None:
        report(self.emitter, row, duration_ms)


def announce(emitter: Emitter, row: ToolCall, requested: dict[str, Any], description: str, effect: str) -> None:
    """A call stored as `row`, as the log shows it, and its approval request if it waits for one (buffered:
    the caller flushes once the row's transaction is over)."""
    emitter.emit(EventType.ACTIONS_REQUESTED, {"calls": [requested]})
    if row.status == ToolCall.Status.AWAITING_APPROVAL:
        emitter.emit(EventType.ACTION_APPROVAL_REQUESTED, approval_requested(row, requested, description, effect))


def report(emitter: Emitter, row: ToolCall, duration_ms: float) -> None:
    """A call's end, written at once."""
    emitter.emit(EventType.ACTION_RESULT, result_payload(row, duration_ms))
    emitter.flush()


def _subagent(call_input: dict[str, Any]) -> str:
    return str(call_input.get("subagent_type", ""))
