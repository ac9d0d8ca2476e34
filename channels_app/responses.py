"""Response bodies of the HTTP channel, as pydantic models, and the renderer that writes them.

Fields are snake_case here and camelCase on the wire (`to_camel` aliases),
like the request bodies in `bodies.py`; the same models give the OpenAPI
document its response schemas, so what is documented is what is sent.
Views build them from rows they already loaded: rendering costs no query.
"""
from __future__ import annotations

from datetime import datetime
from urllib.parse import quote
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from rest_framework import renderers

from agents.models import Deployment
from channels_app.described import JSONObject, JSONValue, PrincipalDescription, SessionOptions, TurnTimings, Usage
from sessions.direct.calls import Finished, Parked
from sessions.models import Artifact as ArtifactRow, PersonalToken, Reminder as ReminderRow, Session, ToolCall, Turn


class Reply(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True,
                              json_schema_serialization_defaults_required=True)
    # Fields left unset are left out of the body (results whose keys depend on the outcome).
    omit_unset: ClassVar[bool] = False


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, which also writes a `Reply` (by alias, straight from pydantic-core)."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if isinstance(data, Reply):
            return data.model_dump_json(exclude_unset=data.omit_unset).encode()
        return super().render(data, accepted_media_type, renderer_context)


# -- errors -------------------------------------------------------------------------------

class Page(Reply):
    """A list paged after clients had it whole: `nextCursor` comes only when another page follows,
    so the body of a list that fits one page is what it always was."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)
    omit_unset: ClassVar[bool] = True  # every field of the items is set by their `of`


class ErrorDetail(Reply):
    code: str
    message: str
    # Free-form, by code: for `invalid_request` a list of {field, message, type}; often null.
    details: JSONValue = None


class ErrorBody(Reply):
    """Every refusal: `{"error": {"code", "message", "details"}}`."""

    error: ErrorDetail


# -- agents -------------------------------------------------------------------------------

class DeploymentRef(Reply):
    version: int
    content_hash: str

    @classmethod
    def of(cls, deployment: Deployment) -> DeploymentRef:
        return cls(version=deployment.version, content_hash=deployment.content_hash)


class AgentSummary(Reply):
    slug: str
    name: str
    description: str
    model: str
    deployment: DeploymentRef


class AgentList(Page):
    """One page of the agents, by slug; `nextCursor` only when another page follows."""

    agents: list[AgentSummary]
    next_cursor: str | None = None


class DeploymentDetail(DeploymentRef):
    source: str
    status: str
    created_at: datetime | None
    activated_at: datetime | None


class AgentHealth(Reply):
    status: Literal["ok"]
    agent: str
    deployed: bool


class Health(Reply):
    status: Literal["ok"]


# -- sessions -----------------------------------------------------------------------------

class SessionLinks(Reply):
    stream_url: str
    events_url: str
    playground_url: str

    @staticmethod
    def at(origin: str, slug: str, session_id: str) -> SessionLinks:
        """A session's absolute URLs under `origin` (the public URL, or the request's own)."""
        base = f"{origin}/{slug}/v1/session/{session_id}"
        return SessionLinks(stream_url=f"{base}/stream", events_url=f"{base}/events",
                            playground_url=f"{origin}/playground/{slug}?sessionId={session_id}")


class SessionCreated(SessionLinks):
    session_id: str
    continuation_token: str
    turn_id: str
    status: str
    mode: str
    model: str  # the provider:model it is bound to: the one asked for, else the agent's default


class FollowUpAccepted(SessionLinks):
    session_id: str
    continuation_token: str
    turn_id: str
    status: str
    admission: Literal["preempt", "coalesce"]


class StopAccepted(Reply):
    session_id: str
    stopping: bool


class PrincipalRef(Reply):
    authenticator: str
    principal_id: str
    principal_type: str


class SessionDetail(Reply):
    session_id: str
    agent: str
    status: str
    mode: str
    title: str
    channel: str
    principal: PrincipalRef
    usage: Usage
    options: SessionOptions
    deployment: DeploymentRef
    model: str  # the provider:model its turns run on, chosen at its creation (moved only by a handoff)
    active_turn_id: str | None
    last_event_index: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, session: Session) -> SessionDetail:
        return cls(
            session_id=session.id, agent=session.agent.slug, status=session.status, mode=session.mode,
            title=session.title, channel=session.channel, model=session.bound_model,
            principal=PrincipalRef(authenticator=session.authenticator, principal_id=session.principal_id,
                                   principal_type=session.principal_type),
            usage=session.usage, options=session.options,
            deployment=DeploymentRef.of(session.deployment), active_turn_id=session.active_turn_id,
            last_event_index=session.next_event_index - 1,
            created_at=session.created_at, updated_at=session.updated_at,
        )


class LastTurn(Reply):
    """The session's newest turn: `timings` once it has ended; `traceId` when it is traced (OpenTelemetry on)."""

    id: str
    status: str
    timings: TurnTimings | None
    trace_id: str | None = None


class SessionWithLastTurn(SessionDetail):
    """A session's detail with its newest turn, `lastTurn` (null before the first)."""

    last_turn: LastTurn | None = None

    @classmethod
    def with_turn(cls, session: Session, turn: Turn | None) -> SessionWithLastTurn:
        last = turn and LastTurn(id=turn.id, status=turn.status, timings=turn.timings, trace_id=turn.trace_id or None)
        return cls(**dict(SessionDetail.of(session)), last_turn=last)


class SessionPage(Reply):
    """One page of the caller's sessions, newest first; `nextCursor` is null on the last page."""

    sessions: list[SessionDetail]
    next_cursor: str | None


class EventEnvelope(Reply):
    """One line of the NDJSON event log (documentation only: the log is written as it is stored)."""

    type: str
    index: int
    session_id: str
    turn_id: str | None = None
    at: datetime
    # Free-form: each type has its own (DESIGN.md lists them; `timings` of turn.completed/failed: TurnTimings).
    data: JSONObject


# -- tools and approvals ------------------------------------------------------------------

class Approval(Reply):
    call_id: str
    tool_name: str
    input: JSONValue  # the tool's input, free-form
    status: str
    turn_id: str
    decided_by: PrincipalDescription | None
    reason: str
    requested_at: datetime

    @classmethod
    def of(cls, row: ToolCall) -> Approval:
        return cls(call_id=row.call_id, tool_name=row.tool, input=row.input, status=row.status, turn_id=row.turn_id,
                   decided_by=row.decided_by, reason=row.reason, requested_at=row.created_at)


class ApprovalDecided(Reply):
    """What a custom channel's `req.resolve_approval(...)` returns."""

    call_id: str
    tool_name: str
    status: str

    @classmethod
    def of(cls, row: ToolCall) -> ApprovalDecided:
        return cls(call_id=row.call_id, tool_name=row.tool, status=row.status)


class ApprovalList(Page):
    """One page of the calls awaiting a decision, oldest first; `nextCursor` only when another page follows."""

    approvals: list[Approval]
    next_cursor: str | None = None


class ToolResult(Reply):
    """A finished direct call: `output`, or `isError` and `error` when the tool raised (as MCP answers a
    failed tool: the call ran, so it is not a refusal)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)
    omit_unset: ClassVar[bool] = True
    call_id: str
    tool_name: str
    output: JSONValue = None  # what the tool returned, free-form
    error: str | None = None
    is_error: bool
    stubbed: bool
    duration_ms: float

    @classmethod
    def of(cls, done: Finished) -> ToolResult:
        outcome = {"output": done.output} if done.ok else {"error": done.error}
        return cls(call_id=done.call_id, tool_name=done.tool_name, stubbed=done.stubbed, is_error=not done.ok,
                   duration_ms=done.duration_ms, **outcome)


class ParkedToolCall(Reply):
    """A call bound to a session that waits for a decision at `.../approvals/{callId}`."""

    call_id: str
    tool_name: str
    input: JSONValue  # the tool's input, free-form
    status: Literal["awaiting_approval"]
    session_id: str
    turn_id: str

    @classmethod
    def of(cls, parked: Parked) -> ParkedToolCall:
        return cls(call_id=parked.call_id, tool_name=parked.tool_name, input=parked.input,
                   status="awaiting_approval", session_id=parked.session_id, turn_id=parked.turn_id)


# -- reminders and schedules --------------------------------------------------------------

class Reminder(Reply):
    reminder_id: str
    session_id: str | None
    title: str
    kind: str
    spec: str
    form: Literal["run", "prompt"]
    prompt: str
    until: str
    status: str
    reason: str
    fire_count: int
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, r: ReminderRow) -> Reminder:
        return cls(reminder_id=r.id, session_id=r.session_id, title=r.title, kind=r.kind, spec=r.spec,
                   form="run" if r.is_run_form else "prompt", prompt=r.prompt, until=r.until, status=r.status,
                   reason=r.reason, fire_count=r.fire_count, next_fire_at=r.next_fire_at,
                   last_fired_at=r.last_fired_at, created_at=r.created_at)


class ReminderList(Page):
    """One page of reminders; `nextCursor` only when another page follows."""

    reminders: list[Reminder]
    next_cursor: str | None = None


class ScheduleFired(Reply):
    schedule_id: str
    session_ids: list[str]


# -- personal tokens ----------------------------------------------------------------------

class Token(Reply):
    """A personal token as its owner sees it: never the secret."""

    token_id: str
    name: str
    prefix: str
    agents: list[str] | None
    status: Literal["active", "expired", "revoked"]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: PersonalToken) -> Token:
        return cls(token_id=row.id, name=row.name, prefix=row.prefix, agents=row.agents, status=row.status(),
                   created_at=row.created_at, expires_at=row.expires_at, last_used_at=row.last_used_at,
                   revoked_at=row.revoked_at)


class TokenCreated(Token):
    """The new token with its secret, `token`, shown this once: send it as `Authorization: Bearer <token>`."""

    token: str


class TokenList(Page):
    """One page of the caller's tokens, newest first; `nextCursor` only when another page follows."""

    tokens: list[Token]
    next_cursor: str | None = None


# -- artifacts ----------------------------------------------------------------------------

class Artifact(Reply):
    """A file a turn produced; `downloadUrl` serves its content to the session's principal."""

    name: str
    content_type: str
    size: int
    sha256: str
    turn_id: str | None
    call_id: str | None
    download_url: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: ArtifactRow, slug: str) -> Artifact:
        return cls(name=row.name, content_type=row.content_type, size=row.size, sha256=row.sha256,
                   turn_id=row.turn_id or None, call_id=row.call_id or None,
                   download_url=artifact_path(slug, row.session_id, row.name),
                   created_at=row.created_at, updated_at=row.updated_at)


class ArtifactList(Page):
    """One page of the session's artifacts, oldest first; `nextCursor` only when another page follows."""

    artifacts: list[Artifact]
    next_cursor: str | None = None


def artifact_path(slug: str, session_id: str, name: str) -> str:
    """Where an artifact downloads, with its name percent-encoded as one path segment."""
    return f"/{slug}/v1/session/{session_id}/artifacts/{quote(name, safe='')}"
