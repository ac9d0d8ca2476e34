"""Reading a credential by name: the agent's secrets first, then the environment.

Code that runs for an agent (a turn, a direct tool call, a channel's request
or background job, its replies) runs inside `agents.secrets.store.acting_for(slug)`.
Inside it, `credential(name)` is the agent's secret `name` if set, else the
environment variable; outside any agent, the environment alone. The first
lookup in a scope reads the agent's rows in one query and the scope keeps
them, so a turn that reads three credentials makes one query, and a secret
changed meanwhile counts from the next turn or request: no restart.

The scope is a context variable, so it follows the code into tool threads
(they run in a copy of the caller's context) and into MCP calls
(sessions.plumbing.loopthread.submit carries it). This module needs no Django: agent
code imported by `agents.agent_tool` outside the server reaches it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator


class Credentials:
    """One agent's credentials: `secret` is its own (a subclass reads them), `get` falls back to the environment."""

    def __init__(self, slug: str):
        self.slug = slug

    def secret(self, name: str) -> str | None:
        return None

    def get(self, name: str) -> str | None:
        """The secret, else the environment variable; None when neither is set or it is blank."""
        value = self.secret(name)
        if value is None:
            value = os.environ.get(name)
        return value if value and value.strip() else None


_current: ContextVar[Credentials | None] = ContextVar("agentsite_credentials", default=None)


@contextmanager
def bind(scope: Credentials) -> Iterator[Credentials]:
    """Credentials read inside come from `scope` (an enclosing scope of the same agent is kept)."""
    current = _current.get()
    if current is not None and current.slug == scope.slug:
        yield current
        return
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


def current_agent() -> str | None:
    """The slug of the agent whose credentials are read now, if any."""
    scope = _current.get()
    return scope.slug if scope is not None else None


def credential(name: str) -> str | None:
    """The credential `name` for the agent acting now, else the environment's; None when unset or blank."""
    scope = _current.get()
    if scope is None:
        value = os.environ.get(name)
        return value if value and value.strip() else None
    return scope.get(name)


class CredentialMap:
    """`credential` as a read-only mapping, for code that takes an environment-like object."""

    def get(self, name: str, default: str | None = None) -> str | None:
        value = credential(name)
        return default if value is None else value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and credential(name) is not None

    def __getitem__(self, name: str) -> str:
        value = credential(name)
        if value is None:
            raise KeyError(name)
        return value


credentials = CredentialMap()
