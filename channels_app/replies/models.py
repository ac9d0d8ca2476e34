"""The body of `GET /v1/models`: the models this server runs, their providers' health, their sessions."""
from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import ConfigDict

from agents.providers.runtimes import runtime_name
from channels_app.replies.base import Reply
from sessions.handoff.directory import DirectoryEntry


class ModelEntry(Reply):
    """One model: `provider:model`, whether a credential is set for it, whether its provider answered the
    last health probe (null: not probed, nothing configured), the sessions bound to it and the agents
    (by slug) whose active release lists it among its models or fallbacks."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)
    id: str
    provider: str
    model: str
    # The agent runtime a session on it runs on: "agentsite" (the server's own loop) or "claude-agent".
    runtime: str
    configured: bool
    reachable: bool | None
    checked_at: datetime | None
    # Only when something is wrong: the probe's failure, or why the model cannot be used here.
    error: str | None = None
    sessions: int
    agents: list[str]
    # The server's default model, which agents that name none are deployed with.
    default: bool

    @classmethod
    def of(cls, entry: DirectoryEntry) -> ModelEntry:
        problem = {"error": entry.error} if entry.error else {}
        return cls(
            id=entry.id,
            provider=entry.provider,
            model=entry.model,
            runtime=runtime_name(entry.id),
            configured=entry.configured,
            reachable=entry.reachable,
            checked_at=entry.checked_at,
            sessions=entry.sessions,
            agents=entry.agents,
            default=entry.default,
            **problem,
        )


class ModelDirectory(Reply):
    omit_unset: ClassVar[bool] = True  # `error` only where there is one

    models: list[ModelEntry]
