"""Bodies of the personal token routes (`/v1/tokens…`): a token as its owner sees it, never its secret
but once, when it is made."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from channels_app.replies.base import Page, Reply
from sessions.models import PersonalToken


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
        return cls(
            token_id=row.id,
            name=row.name,
            prefix=row.prefix,
            agents=row.agents,
            status=row.status(),
            created_at=row.created_at,
            expires_at=row.expires_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


class TokenCreated(Token):
    """The new token with its secret, `token`, shown this once: send it as `Authorization: Bearer <token>`."""

    token: str


class TokenList(Page):
    """One page of the caller's tokens, newest first; `nextCursor` only when another page follows."""

    tokens: list[Token]
    next_cursor: str | None = None
