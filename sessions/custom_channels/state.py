"""What channel code holds on to: session and channel handles, and a session's channel state."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable

from sessions.models import Session


def key_hash(key: str) -> str:
    """A key as stored on a channel whose sessions are shared (and as every key was stored before
    keys were per principal)."""
    return hashlib.sha256(key.encode()).hexdigest()


def owned_key_hash(key: str, principal: Any) -> str:
    """A key as stored on a channel whose sessions are per principal: the owner's identity is
    hashed with it, so another principal's same key is another key, and another session."""
    owner = ["principal-key", principal.authenticator, principal.principal_id, key]
    return hashlib.sha256(json.dumps(owner).encode()).hexdigest()


class ChannelError(Exception):
    """A channel handler asked for something that cannot be (an unknown session, a bad argument)."""


class SessionNotFound(ChannelError):
    """A session id that names none of the channel's sessions the acting principal may reach:
    a route answers 404, the same whether it does not exist or is another principal's."""


def check_json(what: str, value: Any) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ChannelError(f"{what} must be JSON values: {exc}") from None


class ChannelState:
    """A session's channel state: JSON on the session row, changed under its row lock.

    `get()` reads it; `set(value)` replaces it; `update(changes)` merges keys;
    `modify(fn)` replaces it with `fn(current)`, read and written in one transaction
    (so two deliveries changing it at once do not lose either change).
    """

    def __init__(self, session_id: str):
        self.session_id = session_id

    def get(self) -> dict[str, Any]:
        value = Session.objects.filter(pk=self.session_id).values_list("channel_state", flat=True).first()
        if value is None:
            raise ChannelError(f"session {self.session_id!r} does not exist")
        return value

    def set(self, value: dict[str, Any]) -> dict[str, Any]:
        return self.modify(lambda _: value)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        return self.modify(lambda current: {**current, **changes})

    def modify(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        def checked(current: dict[str, Any]) -> dict[str, Any]:
            value = fn(current)
            check_json("channel state", value)  # raised under the lock: nothing is written
            return value

        try:
            return Session.change_channel_state(self.session_id, checked)
        except Session.DoesNotExist:
            raise ChannelError(f"session {self.session_id!r} does not exist") from None


@dataclass(frozen=True)
class SessionHandle:
    """What `send` and `get_session` return."""

    session_id: str
    status: str
    continuation_token: str | None
    created: bool = False
    turn_id: str = ""

    @property
    def state(self) -> ChannelState:
        return ChannelState(self.session_id)


@dataclass(frozen=True)
class ChannelHandle:
    """The `channel` argument of an events-map handler."""

    id: str
    session_id: str

    @property
    def state(self) -> ChannelState:
        return ChannelState(self.session_id)
