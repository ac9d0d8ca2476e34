"""Bodies of the tool routes: calls awaiting a decision, a decided one, and a direct call's outcome."""
from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import ConfigDict

from channels_app.described import JSONValue, PrincipalDescription
from channels_app.replies.base import Page, Reply
from sessions.direct.calls import Finished, Parked
from sessions.models import ToolCall


class Approval(Reply):
    """A parked call: one for approval (`kind` approval), or the model's question to the person (`kind`
    question: answer it at `…/questions/{callId}`; its input holds `question` and `options`)."""

    call_id: str
    tool_name: str
    kind: Literal["approval", "question"]
    input: JSONValue  # the tool's input, free-form
    status: str
    turn_id: str
    decided_by: PrincipalDescription | None
    reason: str
    requested_at: datetime

    @classmethod
    def of(cls, row: ToolCall) -> Approval:
        return cls(
            call_id=row.call_id,
            tool_name=row.tool,
            kind="question" if row.question else "approval",
            input=row.input,
            status=row.status,
            turn_id=row.turn_id,
            decided_by=row.decided_by,
            reason=row.reason,
            requested_at=row.created_at,
        )


class Question(Reply):
    """A question the model asked (`ask_question`), as its answer left it."""

    call_id: str
    turn_id: str
    question: str
    options: list[str]
    status: Literal["answered"]
    answer: str
    answered_by: PrincipalDescription
    asked_at: datetime
    answered_at: datetime

    @classmethod
    def of(cls, row: ToolCall) -> Question:
        return cls(
            call_id=row.call_id,
            turn_id=row.turn_id,
            question=str(row.input.get("question", "")),
            options=list(row.input.get("options") or []),
            status="answered",
            answer=row.output,
            answered_by=row.decided_by,
            asked_at=row.created_at,
            answered_at=row.decided_at,
        )


class ApprovalDecided(Reply):
    """What a custom channel's `req.resolve_approval(...)` returns."""

    call_id: str
    tool_name: str
    status: str

    @classmethod
    def of(cls, row: ToolCall) -> ApprovalDecided:
        return cls(
            call_id=row.call_id,
            tool_name=row.tool,
            status=row.status,
        )


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
        return cls(
            call_id=done.call_id,
            tool_name=done.tool_name,
            stubbed=done.stubbed,
            is_error=not done.ok,
            duration_ms=done.duration_ms,
            **outcome,
        )


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
        return cls(
            call_id=parked.call_id,
            tool_name=parked.tool_name,
            input=parked.input,
            status="awaiting_approval",
            session_id=parked.session_id,
            turn_id=parked.turn_id,
        )
