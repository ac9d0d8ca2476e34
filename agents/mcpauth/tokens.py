"""The bearer token a connection sends, refreshed before it expires.

Called inside the acting agent's scope (agents.secrets.store.acting_for),
from a turn, a direct call or a channel's request: it never starts an
interactive flow, it refreshes or says to run the command.
"""
from __future__ import annotations

import logging
import time

from agents.mcp import McpServer
from agents.mcpauth.flows import REFRESH_TIMEOUT, FlowError, TokenRefused, refresh_grant
from agents.mcpauth.stored import (
    NotAuthorized, access_name, forget_tokens, not_authorized, read, save_refreshed,
)
from agents.models import Agent, Secret
from agents.secrets.lookup import current_agent

log = logging.getLogger(__name__)

REFRESH_MARGIN = 60.0  # seconds: a token this close to expiry is refreshed before it is sent
LEASE = REFRESH_TIMEOUT + 12.0  # seconds a refresh may take before another process may start one
POLL = 0.1  # seconds between reads of a caller waiting for another's refresh


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
    return refresh(_agent(), server, seen=sent, refused=True)


def refresh(agent: Agent, server: McpServer, *, seen: str, refused: bool = False) -> str:
    """A new access token in place of `seen`, the one this caller read (or sent and had `refused`).

    1. Read the tokens: if the access token is no longer `seen` and is good,
       another process refreshed it; use that (its refresh token may have been
       rotated, so refreshing again could fail).
    2. Claim the refresh (a lease on the access token's row): of the processes
       refreshing at once one wins; the others read the row again until the
       winner's token is there, for as long as a lease lasts, then use `seen`
       if it still works or say the refresh could not be done now.
    3. The winner POSTs the refresh grant outside any transaction (on SQLite a
       transaction holds the write lock of every writer while the endpoint
       answers) and stores the tokens in a short one, if its lease still holds.
    A refusal (the refresh token revoked or expired) removes the tokens: the
    server then counts as not authorized everywhere until someone runs the command.
    """
    deadline = time.monotonic() + LEASE
    while True:
        stored = read(agent, server.name)
        if stored.access_token is not None and stored.access_token != seen and not stored.expires_within(0):
            return stored.access_token  # refreshed since the caller read it: as fresh as a new one would be
        if not (stored.access_token and stored.refresh_token and stored.registration and stored.endpoint
                and stored.applies_to(server.url)):
            raise unusable(agent, server, "holds no refresh token")
        lease = Secret.claim_refresh(agent, access_name(server.name), LEASE)
        if lease is not None:
            break
        if time.monotonic() >= deadline:
            if not refused and stored.access_token == seen and not stored.expires_within(0):
                return seen
            raise not_authorized(agent.slug, server.name, "could not be refreshed now (another refresh of it has "
                                 "not finished); if this lasts")
        time.sleep(POLL)
    fresh = read(agent, server.name)  # a refresh may have ended between the read and the claim
    if fresh.access_token is not None and fresh.access_token != seen and not fresh.expires_within(0):
        Secret.release_refresh(agent, access_name(server.name), lease)
        return fresh.access_token
    tokens, why = None, ""
    try:
        tokens = refresh_grant(fresh.refresh_token, fresh.registration, fresh.endpoint)
    except TokenRefused as exc:
        why = f"could not be refreshed ({exc})"
    except FlowError as exc:  # the endpoint is down: the tokens may still be good later
        raise not_authorized(agent.slug, server.name, f"could not be refreshed now ({exc}); if this "
                             "lasts") from None
    finally:
        if tokens is None:
            Secret.release_refresh(agent, access_name(server.name), lease)
    if tokens is None:
        raise unusable(agent, server, why)
    if save_refreshed(agent, server.name, tokens, lease):
        log.info("refreshed the OAuth access token of MCP server %r for agent %s", server.name, agent.slug)
    else:
        log.warning("the OAuth refresh of MCP server %r for agent %s outlasted its lease: its tokens were not "
                    "stored", server.name, agent.slug)
    return tokens.access_token


def unusable(agent: Agent, server: McpServer, why: str) -> NotAuthorized:
    """Forget the tokens, which will never work again; the error that says to run the command."""
    forget_tokens(agent, server.name)
    log.warning("OAuth tokens of MCP server %r for agent %s are unusable: %s", server.name, agent.slug, why)
    return not_authorized(agent.slug, server.name, f"is no longer authorized: its token was refused and it {why}")
