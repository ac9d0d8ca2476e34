"""The bearer token a connection sends, refreshed before it expires.

Called inside the acting agent's scope (agents.secrets.store.acting_for),
from a turn, a direct call or a channel's request: it never starts an
interactive flow, it refreshes or says to run the command.
"""
from __future__ import annotations

import logging

from django.db import transaction

from agents.mcp import McpServer
from agents.mcpauth.flows import FlowError, TokenRefused, refresh_grant
from agents.mcpauth.stored import NotAuthorized, forget_tokens, not_authorized, read, save_tokens
from agents.models import Agent
from agents.secrets.lookup import current_agent

log = logging.getLogger(__name__)

REFRESH_MARGIN = 60.0  # seconds: a token this close to expiry is refreshed before it is sent


def _agent() -> Agent:
    slug = current_agent()
    agent = Agent.objects.only("id", "slug").filter(slug=slug).first() if slug else None
    if agent is None:
        raise NotAuthorized("an OAuth MCP server is reached only on behalf of an agent")
    return agent


def bearer_token(server: McpServer) -> str:
    """The access token to send to `server`, refreshed first when it expires within REFRESH_MARGIN.

    Raises NotAuthorized, whose message says to run `manage.py mcp oauth SLUG NAME`,
    when there is no authorization for the server's declared url or it can no
    longer be refreshed.
    """
    agent = _agent()
    stored = read(agent, server.name)
    if stored.access_token is None or not stored.applies_to(server.url):
        raise not_authorized(agent.slug, server.name)
    if not stored.expires_within(REFRESH_MARGIN):
        return stored.access_token
    if stored.refresh_token is None:
        if stored.expires_within(0):
            raise not_authorized(agent.slug, server.name, "has an expired access token and no refresh token")
        return stored.access_token
    return refresh(agent, server, seen=stored.access_token)


def rejected(server: McpServer, sent: str) -> str:
    """The server answered 401 to `sent`, a token we believed valid: refresh once, or forget the tokens.

    Returns the token to try next; raises NotAuthorized when there is none.
    """
    return refresh(_agent(), server, seen=sent)


def refresh(agent: Agent, server: McpServer, *, seen: str) -> str:
    """A new access token in place of `seen`, the one this caller read (or sent and had refused).

    1. Lock the server's secret rows (select_for_update on PostgreSQL; on SQLite
       every transaction takes the write lock when it begins), so of two
       processes refreshing at once one waits for the other.
    2. Read them again under the lock: if the access token is no longer
       `seen` and is good, another process refreshed it; use that (its refresh
       token may have been rotated, so refreshing again could fail).
    3. Otherwise POST the refresh grant and store the new tokens before the lock is released.
    A refusal (the refresh token revoked or expired) removes the tokens: the
    server then counts as not authorized everywhere until someone runs the command.
    """
    refused = ""
    with transaction.atomic():
        stored = read(agent, server.name, for_update=True)
        if stored.access_token is not None and stored.access_token != seen and not stored.expires_within(0):
            return stored.access_token  # refreshed since the caller read it: as fresh as a new one would be
        if not (stored.refresh_token and stored.registration and stored.endpoint and stored.applies_to(server.url)):
            refused = "holds no refresh token"
        else:
            try:
                tokens = refresh_grant(stored.refresh_token, stored.registration, stored.endpoint)
            except TokenRefused as exc:
                refused = f"could not be refreshed ({exc})"
            except FlowError as exc:  # the endpoint is down: the tokens may still be good later
                raise not_authorized(agent.slug, server.name, f"could not be refreshed now ({exc}); if this "
                                     "lasts") from None
            else:
                save_tokens(agent, server.name, tokens)
                log.info("refreshed the OAuth access token of MCP server %r for agent %s", server.name, agent.slug)
                return tokens.access_token
    forget_tokens(agent, server.name)
    log.warning("OAuth tokens of MCP server %r for agent %s are unusable: %s", server.name, agent.slug, refused)
    raise not_authorized(agent.slug, server.name, f"is no longer authorized: its token was refused and it {refused}")
