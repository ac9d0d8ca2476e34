"""An MCP server's OAuth authorization as the agent's secrets.

Every value is a `Secret` row named `MCP_OAUTH_<NAME>_<PART>`:

    ACCESS_TOKEN    the bearer token; the row's expires_at is when it stops working
    REFRESH_TOKEN   when the authorization server issued one
    CLIENT_ID       the client the authorization server registered
    CLIENT_SECRET   when it issued one
    CLIENT_INFO     the whole registration (JSON), what a refresh authenticates with
    SERVER          JSON: the server URL the tokens were made for (as declared and as
                    expanded), the token endpoint, the resource and scope requested

The rows are read here directly, not through the acting agent's cached
scope (agents.secrets.store): a token refreshed a moment ago by this or
another process must be seen at once.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as tz
from typing import TYPE_CHECKING, Any, TypedDict

from django.db import transaction
from django.utils import timezone

from agents.mcp import expand
from agents.models import Agent, Secret
from agents.secrets.keys import Undecryptable
from agents.secrets.store import acting_for, unreadable

if TYPE_CHECKING:  # the SDK is imported where a registration is read (agents.mcpauth.flows says why)
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

PARTS = ("ACCESS_TOKEN", "REFRESH_TOKEN", "CLIENT_ID", "CLIENT_SECRET", "CLIENT_INFO", "SERVER")
BY = "mcp oauth"


class NotAuthorized(Exception):
    """The server wants OAuth and the agent holds no usable tokens for it: a person must authorize it."""


class Endpoint(TypedDict):
    """What the tokens were made for and what a refresh needs (the SERVER secret)."""
    declared: str          # the url as the declaration writes it, ${VAR}s unexpanded
    url: str               # the url the flow ran against
    tokenEndpoint: str
    resource: str | None   # RFC 8707 resource indicator, sent again on refresh
    scope: str | None
    issuer: str | None     # the authorization server's, which a callback's `iss` must name (RFC 9207)
    issRequired: bool      # it promised to send `iss` on every callback


def secret_prefix(server_name: str) -> str:
    """`MCP_OAUTH_<NAME>`: the name upper-cased, anything but letters and digits as `_`."""
    return "MCP_OAUTH_" + re.sub(r"[^A-Z0-9]", "_", server_name.upper())


def command(slug: str, server_name: str) -> str:
    return f"manage.py mcp oauth {slug} {server_name}"


def not_authorized(slug: str, server_name: str, why: str = "is not authorized") -> NotAuthorized:
    return NotAuthorized(f"MCP server {server_name!r} {why}: run {command(slug, server_name)}")


@dataclass
class Stored:
    """The authorization as stored now; any part may be missing."""
    access_token: str | None
    expires_at: datetime | None
    refresh_token: str | None
    registration: OAuthClientInformationFull | None
    endpoint: Endpoint | None

    def applies_to(self, declared: str) -> bool:
        """Whether it was made for this declaration's url: a changed url needs a new authorization."""
        return self.endpoint is not None and self.endpoint.get("declared") == declared

    def expires_within(self, seconds: float) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now() + timedelta(seconds=seconds)


def read(agent: Agent, server_name: str) -> Stored:
    """The stored parts, decrypted."""
    prefix = secret_prefix(server_name) + "_"
    rows = Secret.objects.filter(agent=agent, name__in=[prefix + p for p in PARTS])
    by_part = {row.name.removeprefix(prefix): row for row in rows}

    def value(part: str) -> str | None:
        row = by_part.get(part)
        if row is None:
            return None
        try:
            return row.reveal()
        except Undecryptable:
            raise NotAuthorized(str(unreadable(agent.slug, row.name))) from None

    from mcp.shared.auth import OAuthClientInformationFull

    info, endpoint = value("CLIENT_INFO"), value("SERVER")
    access = by_part.get("ACCESS_TOKEN")
    return Stored(access_token=value("ACCESS_TOKEN"), expires_at=access.expires_at if access else None,
                  refresh_token=value("REFRESH_TOKEN"),
                  registration=OAuthClientInformationFull.model_validate_json(info) if info else None,
                  endpoint=json.loads(endpoint) if endpoint else None)


def expiry(tokens: OAuthToken) -> datetime | None:
    """When the access token stops working, from its `expires_in` (None: it does not say)."""
    return timezone.now() + timedelta(seconds=int(tokens.expires_in)) if tokens.expires_in is not None else None


def save_tokens(agent: Agent, server_name: str, tokens: OAuthToken, *, by: str = BY) -> None:
    """The access token with its absolute expiry, and the refresh token when one came (a rotated one replaces it)."""
    prefix = secret_prefix(server_name)
    Secret.put(agent, f"{prefix}_ACCESS_TOKEN", tokens.access_token, by=by, expires_at=expiry(tokens))
    if tokens.refresh_token:
        Secret.put(agent, f"{prefix}_REFRESH_TOKEN", tokens.refresh_token, by=by)


def access_name(server_name: str) -> str:
    """The ACCESS_TOKEN row's name: the row whose lease (Secret.claim_refresh) says who refreshes."""
    return f"{secret_prefix(server_name)}_ACCESS_TOKEN"


def save_refreshed(agent: Agent, server_name: str, tokens: OAuthToken, lease) -> bool:
    """A refresh's tokens, stored only if `lease` still holds the refresh (one short transaction); whether they were."""
    with transaction.atomic():
        if not Secret.finish_refresh(agent, access_name(server_name), lease, tokens.access_token, by=BY,
                                     expires_at=expiry(tokens)):
            return False
        if tokens.refresh_token:
            Secret.put(agent, f"{secret_prefix(server_name)}_REFRESH_TOKEN", tokens.refresh_token, by=BY)
    return True


def save_registration(agent: Agent, server_name: str, registration: OAuthClientInformationFull, *,
                      by: str = BY) -> None:
    prefix = secret_prefix(server_name)
    Secret.put(agent, f"{prefix}_CLIENT_INFO", registration.model_dump_json(exclude_none=True), by=by)
    if registration.client_id:
        Secret.put(agent, f"{prefix}_CLIENT_ID", registration.client_id, by=by)
    if registration.client_secret:
        Secret.put(agent, f"{prefix}_CLIENT_SECRET", registration.client_secret, by=by)
    else:
        Secret.remove(agent, f"{prefix}_CLIENT_SECRET")


def save_endpoint(agent: Agent, server_name: str, endpoint: Endpoint, *, by: str = BY) -> None:
    Secret.put(agent, f"{secret_prefix(server_name)}_SERVER", json.dumps(endpoint), by=by)


def save_authorization(agent: Agent, server_name: str, *, tokens: OAuthToken,
                       registration: OAuthClientInformationFull, endpoint: Endpoint, by: str = BY) -> None:
    """A completed flow: every part at once, and a refresh token of an earlier authorization dropped."""
    Secret.remove(agent, f"{secret_prefix(server_name)}_REFRESH_TOKEN")
    save_registration(agent, server_name, registration, by=by)
    save_endpoint(agent, server_name, endpoint, by=by)
    save_tokens(agent, server_name, tokens, by=by)


def forget_tokens(agent: Agent, server_name: str) -> None:
    """The tokens stopped working for good (revoked): remove them, so every reader says to authorize again."""
    prefix = secret_prefix(server_name)
    Secret.objects.filter(agent=agent, name__in=[f"{prefix}_ACCESS_TOKEN", f"{prefix}_REFRESH_TOKEN"]).delete()


class Status(TypedDict, total=False):
    authorized: bool
    expiresAt: str | None
    refreshable: bool
    command: str


def status(agent: Agent, server_name: str, declared_url: str) -> Status:
    """Whether the server is authorized for `agent`, for /info and the pages: never a value, only facts."""
    try:
        stored = read(agent, server_name)
    except NotAuthorized:  # a secret the configured keys cannot decrypt
        return Status(authorized=False, command=command(agent.slug, server_name))
    usable = stored.access_token is not None and stored.applies_to(declared_url) and (
        not stored.expires_within(0) or stored.refresh_token is not None)
    if not usable:
        return Status(authorized=False, command=command(agent.slug, server_name))
    expires = stored.expires_at
    return Status(authorized=True, refreshable=stored.refresh_token is not None,
                  expiresAt=expires.astimezone(tz.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if expires else None)


class NotDeclared(Exception):
    """The agent's active release declares no such OAuth server; the message is one line that says why."""


def declared_server(agent: Agent, server_name: str) -> dict[str, Any]:
    """The active release's description of `server_name`, which must be a url server with oauth."""
    manifest = agent.active_deployment.manifest if agent.active_deployment else None
    if manifest is None:
        raise NotDeclared(f"agent {agent.slug!r} has no active release")
    found = next((m for m in manifest.get("mcp", []) if m.get("name") == server_name), None)
    if found is None:
        names = ", ".join(m.get("name", "") for m in manifest.get("mcp", [])) or "none"
        raise NotDeclared(f"agent {agent.slug!r} declares no MCP server {server_name!r} (it declares: {names})")
    if not found.get("oauth") or not found.get("url"):
        raise NotDeclared(f"MCP server {server_name!r} of agent {agent.slug!r} must be a url server with "
                          "oauth: true")
    return found


def server_url(agent: Agent, declared: str) -> str:
    """The declared url with its ${VAR}s filled from the agent's secrets and the environment."""
    with acting_for(agent.slug):
        try:
            return expand(declared)
        except KeyError as exc:
            raise NotDeclared(str(exc.args[0])) from None


def with_status(agent: Agent, described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest's server descriptions, each one declared with oauth given its `authorization` status."""
    return [{**m, "authorization": status(agent, m["name"], m.get("url", ""))} if m.get("oauth") else m
            for m in described]
