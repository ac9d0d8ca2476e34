"""The `t` a case's test gets: send messages to the agent, then gate on what happened.

`Trial` knows nothing of HTTP: it drives a `Conversation` (duck-typed: `send(message, files)` returns
the events of the turn it started, up to the turn's end or park), so the same cases run against any
server the runner reaches.
"""
from __future__ import annotations

import base64
from typing import Any, Protocol

from agents.evals.gates import GateFailed, Matcher

ENDED = ("turn.completed", "turn.failed")


class Conversation(Protocol):
    session_id: str | None
    playground_url: str | None

    def send(self, message: str, files: list[dict[str, str]]) -> list[dict[str, Any]]: ...


def sent_files(workspace_files: dict[str, str | bytes] | list[dict[str, str]] | None) -> list[dict[str, str]]:
    """`{path: text or bytes}` or the API's `[{path, content, encoding}]` as the API takes them."""
    if not workspace_files:
        return []
    if isinstance(workspace_files, dict):
        files = []
        for path, content in workspace_files.items():
            if isinstance(content, bytes):
                files.append({"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"})
            else:
                files.append({"path": path, "content": content})
        return files
    return list(workspace_files)


class Trial:
    """One case's run: `send`, then gates (`succeeded`, `called_tool`, `not_called_tool`, `check`) and metrics."""

    def __init__(self, conversation: Conversation):
        self._conversation = conversation
        self.events: list[dict[str, Any]] = []
        self.reply: str = ""
        self.status: str = ""  # completed, failed, awaiting_approval: how the last turn settled
        self.error: str = ""  # the failed turn's code and message
        self.metrics: dict[str, float] = {}

    @property
    def session_id(self) -> str | None:
        return self._conversation.session_id

    def send(self, message: str, workspace_files: dict[str, str | bytes] | list[dict[str, str]] | None = None) -> str:
        """Send `message` (the first opens the session) and wait until its turn ends or parks; returns the reply."""
        events = self._conversation.send(message, sent_files(workspace_files))
        self.events.extend(events)
        replies = [e["data"].get("text", "") for e in events if e["type"] == "message.completed"]
        self.reply = "\n\n".join(r for r in replies if r)
        self.status, self.error = "", ""
        for event in events:
            if event["type"] == "action.approval_requested":
                self.status = "awaiting_approval"
            elif event["type"] in ENDED:
                self.status = "completed" if event["type"] == "turn.completed" else "failed"
                data = event["data"]
                failed = event["type"] == "turn.failed"
                self.error = f"{data.get('code') or ''} {data.get('error') or ''}".strip() if failed else ""
        return self.reply

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """Every call the agent asked for, in order: `{"toolName", "input"}` (subagents' included)."""
        return self._calls(0)

    def _calls(self, since: int) -> list[dict[str, Any]]:
        calls = []
        for event in self.events[since:]:
            if event["type"] == "actions.requested":
                calls.extend({"toolName": c.get("toolName"), "input": c.get("input")}
                             for c in event["data"].get("calls", []))
        return calls

    def _called(self, since: int = 0) -> list[str]:
        return [c["toolName"] for c in self._calls(since)]

    def succeeded(self) -> None:
        """The last turn completed (not failed, not waiting for an approval)."""
        if not self.events:
            raise GateFailed("succeeded", "nothing was sent: call t.send(...) first")
        if self.status != "completed":
            detail = f": {self.error}" if self.error else ""
            raise GateFailed("succeeded", f"the turn did not complete, it is {self.status or 'unfinished'}{detail}")

    def called_tool(self, name: str, *, since: int = 0) -> None:
        """`name` was called (among the events from index `since` of `t.events` on: by default, all)."""
        called = self._called(since)
        if name not in called:
            raise GateFailed("called_tool", f"{name} was not called (calls: {', '.join(called) or 'none'})")

    def not_called_tool(self, name: str, *, since: int = 0) -> None:
        if name in self._called(since):
            raise GateFailed("not_called_tool", f"{name} was called, and must not be")

    def check(self, value: Any, matcher: Matcher) -> None:
        if not matcher(value):
            shown = repr(value)
            shown = shown if len(shown) <= 200 else shown[:197] + "..."
            raise GateFailed("check", f"{shown} does not satisfy: {matcher.description}")

    def metric(self, name: str, value: float) -> None:
        """A number to report with the case (not a gate)."""
        self.metrics[name] = float(value)
