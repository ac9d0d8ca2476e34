"""Request bodies of the HTTP channel, validated strictly with pydantic.

camelCase on the wire, snake_case here; unknown fields and wrong types are
400s rather than silently ignored or coerced. The JSON itself was checked
by `channels_app.parsers.load_json` (depth, numbers, storable text).
"""
from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from channels_app.errors import APIError
from sessions.workspaces import valid_sent_path


# Text either database stores: no NUL (what `load_json` refuses, said in the OpenAPI document).
# Lone surrogates are refused too, but no JSON generator produces them and not every
# regex engine can spell them.
NO_NUL = r"^[^\u0000]*$"
NOT_BLANK = r"^[^\u0000]*[^\u0000\s][^\u0000]*$"
TEXT = {"pattern": NO_NUL}
# sessions.timers.DURATION, spelled for any regex engine; zero and more than ten years are refused too.
DURATION = {"pattern": r"^(?:[ \t\n\r\f\v]*[0-9]+[ \t\n\r\f\v]*[smhd][ \t\n\r\f\v]*)?$"}  # empty: absent


def message_schema(schema: dict[str, Any]) -> None:
    """A message or a prompt: not blank, and within AGENTSITE_MAX_MESSAGE_CHARS as configured now."""
    schema.update(pattern=NOT_BLANK, maxLength=settings.AGENTSITE_MAX_MESSAGE_CHARS)


def within_message_limit(value: str) -> str:
    """AGENTSITE_MAX_MESSAGE_CHARS, read per request (a pydantic max_length is fixed at import)."""
    limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
    if len(value) > limit:
        raise PydanticCustomError("string_too_long", "String should have at most {max_length} characters",
                                  {"max_length": limit})
    return value


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel, populate_by_name=False)


class MessageBody(Body):
    message: str = Field(min_length=1, json_schema_extra=message_schema)

    @field_validator("message")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("message must not be blank")
        return within_message_limit(value)


class WorkspaceFile(Body):
    """A file written into the session's workspace before the turn starts."""

    path: str = Field(min_length=1, max_length=512, json_schema_extra={
        "pattern": r"^[^\u0000\\/]+$|^[^\u0000\\/][^\u0000\\]*[^\u0000\\/]$",
        "description": "Relative to the workspace: no leading '/', no '..', no backslash, no percent-encoded bytes"})
    content: str = Field(json_schema_extra=TEXT)
    encoding: Literal["utf-8", "base64"] = "utf-8"

    @field_validator("path")
    @classmethod
    def contained(cls, value: str) -> str:
        return valid_sent_path(value)

    def data(self) -> bytes:
        if self.encoding == "base64":
            return base64.b64decode(self.content, validate=True)
        return self.content.encode("utf-8")

    def stored(self) -> dict[str, Any]:
        return {"path": self.path, "content": self.content, "encoding": self.encoding}


def checked_files(files: list[WorkspaceFile], where: str) -> list[dict[str, Any]]:
    """Files as stored with the turn: decodable, each within the size limit, each path once."""
    limit = settings.AGENTSITE_WORKSPACE_FILE_MAX_BYTES
    if len(files) > settings.AGENTSITE_WORKSPACE_FILES_MAX:
        raise APIError(400, "too_many_workspace_files",
                       f"{where}: {len(files)} files, more than {settings.AGENTSITE_WORKSPACE_FILES_MAX} in one message")
    seen: set[str] = set()
    for i, sent in enumerate(files):
        try:
            size = len(sent.data())
        except (binascii.Error, ValueError):
            raise APIError(400, "invalid_request", f"{where}[{i}].content is not valid base64") from None
        if size > limit:
            raise APIError(400, "workspace_file_too_large",
                           f"{where}[{i}] ({sent.path}) is {size} bytes, more than {limit}")
        if sent.path in seen:
            raise APIError(400, "invalid_request", f"{where}: {sent.path} is sent twice")
        seen.add(sent.path)
    return [f.stored() for f in files]


RUNTIME_OVERLAY = {
    "type": "object",
    "description": "Overlay the agent's runtime for this session: only `kind: local` (the agent's own) with extra "
                   "`workspaceFiles`; anything else is refused with a code that says why",
    "properties": {"kind": {"type": "string", "enum": ["local"]},
                   "workspaceFiles": {"type": "array", "items": WorkspaceFile.model_json_schema()}},
    "required": ["kind"],
    "additionalProperties": False,
}


class CreateSession(MessageBody):
    title: str | None = Field(default=None, max_length=200, json_schema_extra=TEXT)
    mode: Literal["chat", "task"] = "chat"
    dry_run: bool = False
    as_of: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    continuation_token: str | None = Field(default=None, max_length=200, json_schema_extra=TEXT)
    admission: Literal["preempt", "coalesce"] = "preempt"
    workspace_files: list[WorkspaceFile] | None = None
    runtime: dict[str, Any] | None = Field(default=None, json_schema_extra=RUNTIME_OVERLAY)

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
    continuation_token: str | None = Field(default=None, max_length=200, json_schema_extra=TEXT)
    admission: Literal["preempt", "coalesce"] = "preempt"
    workspace_files: list[WorkspaceFile] | None = None


class SocketMessage(MessageBody):
    """A `{"type": "message", ...}` websocket frame; `type` and fields the socket ignores may come along."""

    model_config = ConfigDict(extra="ignore")
    admission: Literal["preempt", "coalesce"] = "preempt"


class ApprovalDecision(Body):
    decision: Literal["approve", "deny"]
    reason: str = Field(default="", max_length=2000, json_schema_extra=TEXT)


class ToolCallBody(Body):
    input: dict[str, Any] = Field(default_factory=dict)  # documented as JSON without NUL by channels_app.schema
    session_id: str | None = Field(default=None, max_length=40, json_schema_extra=TEXT)


class CreateReminder(Body):
    """Exactly one of delay, every, cron (an empty one counts as absent), as `create_reminder` wants."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [
        {"required": [name], "properties": {name: {"type": "string", "minLength": 1}}}
        for name in ("delay", "every", "cron")
    ]})
    delay: str | None = Field(default=None, max_length=20, json_schema_extra=DURATION)
    every: str | None = Field(default=None, max_length=20, json_schema_extra=DURATION)
    cron: str | None = Field(default=None, max_length=100, json_schema_extra=TEXT)
    prompt: str = Field(min_length=1, json_schema_extra=message_schema)
    until: str = Field(default="", max_length=2000, json_schema_extra=TEXT)
    title: str = Field(default="", max_length=200, json_schema_extra=TEXT)

    @field_validator("prompt")
    @classmethod
    def prompt_within_limit(cls, value: str) -> str:
        return within_message_limit(value)


def validate_body(model: type[BaseModel], data: Any, where: str = "") -> Any:
    """`data` as `model`, or a 400 `invalid_request` whose details name each bad field (under `where`)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [
            {"field": ".".join([where] * bool(where) + [str(p) for p in e["loc"]]) or "body", "message": e["msg"],
             "type": e["type"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        message = "; ".join(f"{d['field']}: {d['message']}" for d in details)
        raise APIError(400, "invalid_request", message, details) from None
