"""Bodies of the session routes: a session's links, its detail and newest turn, a page of sessions,
and the event envelope of its log."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from channels_app.described import JSONObject, SessionOptions, TurnTimings, Usage
from channels_app.replies.agents import DeploymentRef
from channels_app.replies.base import Reply
from sessions.models import Session, Turn


class SessionLinks(Reply):
    stream_url: str
    events_url: str
    playground_url: str

    @staticmethod
    def at(origin: str, slug: str, session_id: str) -> SessionLinks:
        """A session's absolute URLs under `origin` (the public URL, or the request's own)."""
        base = f"{origin}/{slug}/v1/session/{session_id}"
        return SessionLinks(
            stream_url=f"{base}/stream",
            events_url=f"{base}/events",
            playground_url=f"{origin}/playground/{slug}?sessionId={session_id}",
        )


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
            session_id=session.id,
            agent=session.agent.slug,
            status=session.status,
            mode=session.mode,
            title=session.title,
            channel=session.channel,
            model=session.bound_model,
            principal=PrincipalRef(
                authenticator=session.authenticator,
                principal_id=session.principal_id,
                principal_type=session.principal_type,
            ),
            usage=session.usage,
            options=session.options,
            deployment=DeploymentRef.of(session.deployment),
            active_turn_id=session.active_turn_id,
            last_event_index=session.next_event_index - 1,
            created_at=session.created_at,
            updated_at=session.updated_at,
        )


class LastTurn(Reply):
    """The session's newest turn: `timings` once it has ended; `traceId` when it is traced (OpenTelemetry on)."""

    id: str
    status: str
    timings: TurnTimings | None
    trace_id: str | None = None

    @classmethod
    def of(cls, turn: Turn) -> LastTurn:
        return cls(
            id=turn.id,
            status=turn.status,
            timings=turn.timings,
            trace_id=turn.trace_id or None,
        )


class SessionWithLastTurn(SessionDetail):
    """A session's detail with its newest turn, `lastTurn` (null before the first)."""

    last_turn: LastTurn | None = None

    @classmethod
    def with_turn(cls, session: Session, turn: Turn | None) -> SessionWithLastTurn:
        return cls(**dict(SessionDetail.of(session)), last_turn=turn and LastTurn.of(turn))


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
