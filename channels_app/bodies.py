"""Request bodies of the HTTP channel, validated strictly with pydantic.

camelCase on the wire, snake_case here; unknown fields and wrong types are
400s rather than silently ignored or coerced. The JSON itself was checked
by `channels_app.parsers.load_json` (depth, numbers, storable text).
"""
from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, PydanticCustomError

from agents.models import SECRET_MAX_BYTES, Agent
from channels_app.errors import APIError
from channels_app.patterns import BASE64, CRON, SENT_PATH, duration_pattern
from sessions.workspaces.store import valid_sent_path


# Text either database stores: no NUL (what `load_json` refuses, said in the OpenAPI document).
# Lone surrogates are refused too, but no JSON generator produces them and not every
# regex engine can spell them.
NO_NUL = r"^[^\u0000]*$"
# Blank is written out, not `\s`: the document's regex (ECMA-262), Python's and pydantic's differ on it
# (\u001c-\u001f and \u0085 are whitespace to Python only, \ufeff to ECMA only), and a message of "\u001f"
# was refused as blank although the document's pattern takes it. Their union, the same in every engine.
BLANK_CHARS = r"\t\n\v\f\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
NOT_BLANK = rf"^[^\u0000]*[^\u0000{BLANK_CHARS}][^\u0000]*$"
_BLANK = re.compile(rf"[{BLANK_CHARS}]*")
TEXT = {"pattern": NO_NUL}


def duration_schema(schema: dict[str, Any]) -> None:
    """A duration as `parse_duration` takes it (from 1 to ten years), or empty for absent."""
    schema.update(pattern=duration_pattern(), description="A number and a unit (s, m, h, d), e.g. '20m', "
                  "from 1s to ten years; empty counts as absent")


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


def whole_number(value: Any) -> Any:
    """403.0 as 403: JSON Schema counts a number with no fraction as an integer, strict pydantic does not.
    Booleans and fractions stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class Body(BaseModel):
    # defer_build: a body's validator is built when a request first brings one, not as the process starts.
    model_config = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel, populate_by_name=False,
                              defer_build=True)


class MessageBody(Body):
    message: str = Field(min_length=1, json_schema_extra=message_schema)

    @field_validator("message")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if _BLANK.fullmatch(value):
            raise ValueError("message must not be blank")
        return within_message_limit(value)


def files_schema(schema: dict[str, Any]) -> None:
    """At most AGENTSITE_WORKSPACE_FILES_MAX files as configured now; a path may come once (identical
    files, all the schema can say, are refused like any other two files with one path)."""
    schema.update(maxItems=settings.AGENTSITE_WORKSPACE_FILES_MAX, uniqueItems=True)


def encoded_content(schema: dict[str, Any]) -> None:
    """Plain text, or base64 as `b64decode(validate=True)` takes it, within the decoded size limit."""
    most = 4 * (settings.AGENTSITE_WORKSPACE_FILE_MAX_BYTES // 3)
    schema["oneOf"] = [
        {"properties": {"encoding": {"const": "utf-8"}}},
        {"required": ["encoding"],
         "properties": {"encoding": {"const": "base64"}, "content": {"pattern": BASE64, "maxLength": most}}},
    ]


class WorkspaceFile(Body):
    """A file written into the session's workspace before the turn starts."""

    model_config = ConfigDict(json_schema_extra=encoded_content)
    path: str = Field(min_length=1, max_length=512, json_schema_extra={
        "pattern": SENT_PATH,
        "description": "Relative to the workspace: no leading '/', no '..', no backslash, no percent-encoded bytes"})
    content: str = Field(json_schema_extra={**TEXT, "description": "At most AGENTSITE_WORKSPACE_FILE_MAX_BYTES "
                                             "bytes once encoded as UTF-8 or decoded from base64"})
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


class RuntimeOverlay(Body):
    """Overlay the agent's runtime for this session: only `kind: local` (the agent's own) with extra
    `workspaceFiles`; anything else is refused with a code that says why."""

    kind: Literal["local"]
    workspace_files: list[WorkspaceFile] = Field(default_factory=list, json_schema_extra=files_schema)

    @classmethod
    def admit(cls, raw: dict[str, Any], agent_runtime: str, slug: str) -> RuntimeOverlay:
        """`raw` as an overlay on the agent's runtime (of kind `agent_runtime`), or the refusal that says why:
        the kind first, then the agent's own runtime, then fields a request cannot set, then the files."""
        try:
            overlay = cls.model_validate(raw)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        else:
            errors = []
        if any(e["loc"] == ("kind",) for e in errors):
            raise kind_refused(raw.get("kind"))
        if agent_runtime != "local":
            raise APIError(400, "runtime_overlay_refused",
                           f"agent {slug!r} runs on virtual_runtime: its workspace is its filesystem, and a local "
                           "runtime cannot be overlaid on it")
        if extra := [e["loc"][0] for e in errors if e["type"] == "extra_forbidden"]:
            raise field_refused(str(extra[0]))
        if any(e["loc"] == ("workspaceFiles",) for e in errors):
            raise APIError(400, "invalid_request", "runtime.workspaceFiles must be a list of files")
        if errors:  # the first bad file, as a file of the create body would be refused
            first = errors[0]["loc"][:2]
            raise invalid_request([e for e in errors if e["loc"][:2] == first], "runtime")
        return overlay


def kind_refused(kind: Any) -> APIError:
    if kind is None:
        return APIError(400, "runtime_kind_required", "runtime.kind is required: 'local', the agent's own runtime, "
                                                      "is the only one a session can be sent")
    if kind == "virtual":
        return APIError(400, "runtime_not_sendable", "a virtual runtime's filesystem is code in the agent folder: "
                                                     "it cannot be sent with a request")
    if kind in ("cloud", "grokbot"):
        return APIError(400, "runtime_unavailable", f"this server runs every turn itself: there is no {kind} runtime")
    return APIError(400, "runtime_unknown", f"runtime.kind {kind!r} is not a runtime: send 'local'")


def field_refused(key: str) -> APIError:
    if key in ("workspaceDir", "cwd", "sandbox"):
        return APIError(400, "runtime_overlay_refused",
                        f"runtime.{key} cannot be sent: a session's workspace is the directory the server gives "
                        "it, never a host path or sandbox a caller chooses")
    return APIError(400, "runtime_overlay_refused",
                    f"runtime.{key} is not something a request can change: a send may only add "
                    "workspaceFiles to the agent's local runtime")


def model_schema(schema: dict[str, Any]) -> None:
    """A model id; `enum`: the models every agent on this server may run on, as the document is served
    (one path serves every agent, so the document cannot list each agent's own: its /info does)."""
    schema.update(TEXT, description=(
        "A 'provider:model' id from the agent's models (GET /<slug>/v1/info lists them; absent: its default; "
        "another: 400 model_not_allowed). Chosen when the session is created; a follow-up may name only the "
        "model its session is bound to (another is a 409 handoff_required)"))
    shared = shared_models()
    if shared:
        option_of(schema, "string")["enum"] = shared


def option_of(schema: dict[str, Any], kind: str) -> dict[str, Any]:
    """The `kind` option of an optional field's `anyOf` (the other is null)."""
    return next(option for option in schema["anyOf"] if option.get("type") == kind)


def shared_models(scope: list[str] | None = None) -> list[str]:
    """The models every deployed agent (of `scope`, if given) may run on."""
    per_agent = [set(a.active_deployment.models) for a in Agent.objects.deployed()
                 if scope is None or a.slug in scope]
    return sorted(set.intersection(*per_agent)) if per_agent else []


# A follow-up (a continuationToken) runs on the runtime its session was created with.
NO_RUNTIME_ON_FOLLOW_UP = {"not": {"required": ["continuationToken", "runtime"], "properties": {
    "continuationToken": {"type": "string"}, "runtime": {"type": "object"}}}}


class CreateSession(MessageBody):
    model_config = ConfigDict(json_schema_extra=NO_RUNTIME_ON_FOLLOW_UP)
    title: str | None = Field(default=None, max_length=200, json_schema_extra=TEXT)
    mode: Literal["chat", "task"] = "chat"
    dry_run: bool = False
    as_of: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    continuation_token: str | None = Field(default=None, max_length=200, json_schema_extra=TEXT)
    admission: Literal["preempt", "coalesce"] = "preempt"
    workspace_files: list[WorkspaceFile] | None = Field(default=None, json_schema_extra=files_schema)
    runtime: RuntimeOverlay | None = None
    model: str | None = Field(default=None, min_length=1, max_length=200, json_schema_extra=model_schema)
    # "eval": a session an eval run makes (operators and the loopback principal only); /metrics labels it.
    purpose: Literal["eval"] | None = None

    @field_validator("runtime", mode="wrap")
    @classmethod
    def overlay_read_later(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Only an object here: `RuntimeOverlay.admit` reads it once the agent is known, each refusal with its code."""
        if value is None or isinstance(value, dict):
            return value
        raise PydanticCustomError("dict_type", "Input should be a valid dictionary")

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
    workspace_files: list[WorkspaceFile] | None = Field(default=None, json_schema_extra=files_schema)
    model: str | None = Field(default=None, min_length=1, max_length=200, json_schema_extra=model_schema)


class SocketMessage(MessageBody):
    """A `{"type": "message", ...}` websocket frame; `type` and fields the socket ignores may come along."""

    model_config = ConfigDict(extra="ignore")
    admission: Literal["preempt", "coalesce"] = "preempt"
    model: str | None = Field(default=None, min_length=1, max_length=200, json_schema_extra=TEXT)


class ApprovalDecision(Body):
    decision: Literal["approve", "deny"]
    reason: str = Field(default="", max_length=2000, json_schema_extra=TEXT)


class QuestionAnswer(Body):
    answer: str = Field(min_length=1, max_length=4000, json_schema_extra={"pattern": NOT_BLANK},
                        description="The answer: one of the question's options, or the person's own words")

    @field_validator("answer")
    @classmethod
    def not_blank(cls, value: str) -> str:
        if _BLANK.fullmatch(value):
            raise ValueError("answer must not be blank")
        return value.strip()


class ToolCallBody(Body):
    input: dict[str, Any] = Field(default_factory=dict)  # documented as JSON without NUL by channels_app.schema
    session_id: str | None = Field(default=None, max_length=40, json_schema_extra=TEXT)


def known_agents(schema: dict[str, Any]) -> None:
    """`agents` names agents this server has, as the document is served (the scope refuses others)."""
    slugs = sorted(Agent.objects.if_migrated().values_list("slug", flat=True))
    if slugs:
        option_of(schema["properties"]["agents"], "array")["items"]["enum"] = slugs


def keep_to_scope(schemas: dict[str, Any], scope: list[str] | None) -> None:
    """The document's enums that name agents (`agents`) or what they run on (`model`), cut to a
    scoped token's agents: the document is built for every caller, then cut for this one."""
    if scope is None:
        return
    for schema in schemas.values():
        fields = schema.get("properties", {}) if isinstance(schema, dict) else {}
        if "enum" in str(fields.get("agents", {})):
            items = option_of(fields["agents"], "array")["items"]
            items["enum"] = [slug for slug in items["enum"] if slug in scope]
        if "enum" in str(fields.get("model", {})):
            option = option_of(fields["model"], "string")
            option.pop("enum")
            if shared := shared_models(scope):
                option["enum"] = shared


class CreateToken(Body):
    """A personal token: `agents` lists the agent slugs it may reach (absent: every agent)."""

    model_config = ConfigDict(json_schema_extra=known_agents)

    name: str = Field(min_length=1, max_length=100, pattern=NOT_BLANK)
    expires_days: int | None = Field(default=None, ge=1, le=3650)
    agents: list[Annotated[str, Field(pattern=r"^[-a-zA-Z0-9_]{1,100}$")]] | None = Field(
        default=None, min_length=1, max_length=100)

    integral = field_validator("expires_days", mode="before")(whole_number)


class CreateReminder(Body):
    """Exactly one of delay, every, cron (an empty one counts as absent), as `create_reminder` wants."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [
        {"required": [name], "properties": {name: {"type": "string", "minLength": 1}}}
        for name in ("delay", "every", "cron")
    ]})
    delay: str | None = Field(default=None, max_length=20, json_schema_extra=duration_schema)
    every: str | None = Field(default=None, max_length=20, json_schema_extra=duration_schema)
    cron: str | None = Field(default=None, max_length=100, json_schema_extra={
        "pattern": CRON, "description": "5 fields (minute hour day month weekday, UTC); the pattern is the part of "
                                        "cron syntax that always fires (croniter reads more)"})
    prompt: str = Field(min_length=1, json_schema_extra=message_schema)
    until: str = Field(default="", max_length=2000, json_schema_extra=TEXT)
    title: str = Field(default="", max_length=200, json_schema_extra=TEXT)

    @field_validator("prompt")
    @classmethod
    def prompt_within_limit(cls, value: str) -> str:
        return within_message_limit(value)


def secret_value_schema(schema: dict[str, Any]) -> None:
    """A value is sent, never returned, and no example of one is shown."""
    schema.update(TEXT, format="password", writeOnly=True)
    schema.pop("examples", None)


class SecretValue(Body):
    """The value of an agent's secret: stored encrypted, never sent back (at most 64 KB of UTF-8)."""

    value: str = Field(min_length=1, max_length=SECRET_MAX_BYTES, json_schema_extra=secret_value_schema)


def validate_body(model: type[BaseModel], data: Any, where: str = "") -> Any:
    """`data` as `model`, or a 400 `invalid_request` whose details name each bad field (under `where`)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_request(exc.errors(include_url=False, include_input=False), where) from None


def invalid_request(errors: list[ErrorDetails], where: str = "") -> APIError:
    """Pydantic's errors as the one 400 every body and query gets: each field (under `where`), what is wrong."""
    details = [
        {"field": ".".join([where] * bool(where) + [str(p) for p in e["loc"]]) or "body", "message": e["msg"],
         "type": e["type"]}
        for e in errors
    ]
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details)
    return APIError(400, "invalid_request", message, details)
