"""Who acts in a session: the caller a channel's auth policy admitted, the
operator at the command line, or a schedule.

It lives here, below the channels, because sessions record and check it
(ownership, approvals); `channels_app.auth` decides who it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The Django group whose members are operators (as is every staff user): they see and act on
# every session of every agent, not only their own.
OPERATORS_GROUP = "operators"


def is_operator(user, in_group: bool | None = None) -> bool:
    """Whether a Django user is an operator: staff, or a member of the operators group (`in_group`,
    when the caller has read it already)."""
    if user.is_staff:
        return True
    return bool(user.groups.filter(name=OPERATORS_GROUP).exists() if in_group is None else in_group)


@dataclass(frozen=True)
class Principal:
    authenticator: str
    principal_id: str
    principal_type: str = "user"
    attributes: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # Set only where a Django user is turned into a principal (staff or the operators group),
    # never from what a policy or a request says, so no caller can claim it.
    operator: bool = field(default=False, hash=False, compare=False)

    # DRF treats request.user as a user object.
    is_authenticated = True

    def oversees(self, session) -> bool:
        """Whether acting on `session` is an operator acting on someone else's session
        (the acts `operator.acted` records)."""
        return self.operator and not session.is_owned_by(self)

    def as_dict(self) -> dict[str, Any]:
        return {
            "authenticator": self.authenticator,
            "principalId": self.principal_id,
            "principalType": self.principal_type,
            "attributes": self.attributes,
        }
