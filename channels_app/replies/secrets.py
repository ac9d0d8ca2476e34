"""Bodies of the secret routes (`/v1/agents/<slug>/secrets…`).

What is said about a secret is its metadata: the value never leaves the
server through them, and no field could carry it.
"""
from __future__ import annotations

from datetime import datetime

from agents.models import Secret
from channels_app.replies.base import Page, Reply


class SecretInfo(Reply):
    """One of an agent's secrets: its name, who set it and when, when it stops working (never its value)."""

    name: str
    # A user's name, `cli:<os user>` for `manage.py secrets`, or `local` for the loopback caller.
    set_by: str
    set_at: datetime
    expires_at: datetime | None

    @classmethod
    def of(cls, s: Secret) -> SecretInfo:
        return cls(
            name=s.name,
            set_by=s.set_by,
            set_at=s.set_at,
            expires_at=s.expires_at,
        )


class SecretList(Page):
    """One page of an agent's secrets by name; `nextCursor` only when another page follows."""

    secrets: list[SecretInfo]
    next_cursor: str | None = None
