"""Request bodies of the HTTP channel, validated strictly with pydantic.

camelCase on the wire, snake_case here; unknown fields and wrong types are
400s rather than silently ignored or coerced.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

MAX_MESSAGE_CHARS = 100_000


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel, populate_by_name=False)


class MessageBody(Body):
    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)

    @field_validator("message")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("message must not be blank")
        return value


class CreateSession(MessageBody):
    title: str | None = Field(default=None, max_length=200)
    mode: Literal["chat", "task"] = "chat"
    dry_run: bool = False
    as_of: str | None = None
    continuation_token: str | None = Field(default=None, max_length=200)
    admission: Literal["preempt", "coalesce"] = "preempt"

    @field_validator("as_of")
    @classmethod
    def aware_instant(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("asOf must be an ISO-8601 instant, e.g. 2026-01-31T12:00:00Z") from None
        if instant.tzinfo is None:
            raise ValueError("asOf needs a timezone, e.g. 2026-01-31T12:00:00Z or +02:00")
        return instant.isoformat()


class FollowUp(MessageBody):
    continuation_token: str | None = Field(default=None, max_length=200)
    admission: Literal["preempt", "coalesce"] = "preempt"


class ApprovalDecision(Body):
    decision: Literal["approve", "deny"]
    reason: str = Field(default="", max_length=2000)


class ToolCallBody(Body):
    input: dict[str, Any] = Field(default_factory=dict)
    session_id: str | None = Field(default=None, max_length=40)


class CreateReminder(Body):
    delay: str | None = Field(default=None, max_length=20)
    every: str | None = Field(default=None, max_length=20)
    cron: str | None = Field(default=None, max_length=100)
    prompt: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    until: str = Field(default="", max_length=2000)
    title: str = Field(default="", max_length=200)
