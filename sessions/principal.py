"""Who acts in a session: the caller a channel's auth policy admitted, the
operator at the command line, or a schedule.

It lives here, below the channels, because sessions record and check it
(ownership, approvals); `channels_app.auth` decides who it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Principal:
    authenticator: str
    principal_id: str
    principal_type: str = "user"
    attributes: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    # DRF treats request.user as a user object.
    is_authenticated = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "authenticator": self.authenticator,
            "principalId": self.principal_id,
            "principalType": self.principal_type,
            "attributes": self.attributes,
        }
