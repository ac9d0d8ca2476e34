"""Bodies of a session's handoff to another model: the review (what moves, what is lost) and the
handoff done."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from channels_app.replies.base import Reply
from channels_app.replies.sessions import SessionWithLastTurn
from sessions.models import Handoff


class HandoffRefusal(Reply):
    """Why the handoff may not happen; `alternatives`: the release's other models that are configured."""

    code: str
    message: str
    alternatives: list[str]


class HandoffWorkspace(Reply):
    kind: str
    carried: bool


class HandoffCarried(Reply):
    messages: int
    user_messages: int
    assistant_messages: int
    tool_calls: int
    tool_results: int
    workspace: HandoffWorkspace


class HandoffChange(Reply):
    """One kind of thing lost (`thinking`, `cache`, `images`) or transformed (`toolCallIds`)."""

    kind: str
    count: int
    detail: str


class HandoffReview(Reply):
    """What moving the session to `to` keeps, loses and changes. `reviewId` goes stale with any new event
    or message: POST it back to perform the handoff."""

    session_id: str
    from_model: str = Field(alias="from")
    to: str
    review_id: str
    configured: bool
    refusal: HandoffRefusal | None
    carries_over: HandoffCarried
    lost: list[HandoffChange]
    transformed: list[HandoffChange]
    at_index: int

    @classmethod
    def of(cls, reviewed: dict[str, Any]) -> HandoffReview:
        """The review `sessions.handoff.review` wrote, keyed as the wire is."""
        return cls.model_validate(reviewed)


class HandoffRecord(Reply):
    id: str
    from_model: str = Field(alias="from")
    to: str
    status: str
    created_at: datetime
    ended_at: datetime | None

    @classmethod
    def of(cls, row: Handoff) -> HandoffRecord:
        return cls(
            id=row.id,
            from_model=row.from_model,
            to=row.to_model,
            status=row.status,
            created_at=row.created_at,
            ended_at=row.ended_at,
        )


class HandoffDone(Reply):
    """The completed handoff and the session as its detail shows it now."""

    handoff: HandoffRecord
    session: SessionWithLastTurn
