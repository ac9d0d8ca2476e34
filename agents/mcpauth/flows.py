"""The authorization-code flow with PKCE and dynamic client registration, on the official SDK's client.

Two ways through it:

1. `manage.py mcp oauth` (agents.mcpauth.loopback) runs the SDK's
   `OAuthClientProvider` whole: connecting to the server gets a 401, the
   provider discovers the authorization server, registers a client, hands the
   authorization URL to a person and waits for the browser's redirect to a
   loopback callback, then exchanges the code.
2. The playground's button must let the browser's redirect land on any web
   process, later: `begin` runs the same provider up to the point where it
   would send the person away (discovery and registration done), builds the
   authorization URL itself and returns what the exchange will need; the
   callback calls `exchange_code` with it.

`token_request` is the one place a token endpoint is called from outside
the SDK's provider (the code exchange above and every refresh), with the
client authentication the registration asks for.
"""
from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urljoin

from pydantic import ValidationError

from agents.mcpauth.stored import Endpoint, NotAuthorized, read
from agents.models import Agent

# The SDK is imported where a flow or a refresh runs: its types take most of a second to import, and
# every Django process loads this module (the URL conf, the MCP connections), while few ever run a flow.
if TYPE_CHECKING:
    import httpx2
    from mcp.client.auth.oauth2 import OAuthClientProvider, OAuthContext
    from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

CLIENT_NAME = "agentsite"
TIMEOUT = 15.0
REFRESH_TIMEOUT = 8.0


class FlowError(Exception):
    """The flow could not go on; the message says why (never a token)."""


class TokenRefused(FlowError):
    """The token endpoint refused the grant (400 or 401): the code or the refresh token is no good."""


def client_metadata(redirect_uri: str) -> OAuthClientMetadata:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(client_name=CLIENT_NAME, redirect_uris=[redirect_uri],
                               grant_types=["authorization_code", "refresh_token"], response_types=["code"])


def reusable_registration(agent: Agent, server_name: str, declared: str,
                          redirect_uri: str) -> OAuthClientInformationFull | None:
    """The client registered before for this server and this redirect URI, so a new flow does not register another."""
    try:
        stored = read(agent, server_name)
    except NotAuthorized:  # unreadable with the configured keys: register anew
        return None
    registration = stored.registration
    if registration is None or not stored.applies_to(declared):
        return None
    if redirect_uri not in [str(u) for u in registration.redirect_uris or []]:
        return None
    return registration


class MemoryStorage:
    """The SDK's `TokenStorage`: the flow's results, kept until the command stores them as secrets.

    It offers no tokens, so connecting always starts a new authorization,
    and the registration to reuse, if any.
    """

    def __init__(self, registration: OAuthClientInformationFull | None = None):
        self.tokens: OAuthToken | None = None
        self.registration = registration

    async def get_tokens(self) -> OAuthToken | None:
        return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.registration

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.registration = client_info


def resource_of(context: OAuthContext) -> str | None:
    """The RFC 8707 resource the SDK sends with its requests (and so must a refresh), or None."""
    if context.should_include_resource_param(context.protocol_version):
        return context.get_resource_url()
    return None


def token_endpoint_of(context: OAuthContext) -> str:
    """The discovered token endpoint, or `/token` at the server's origin (as the SDK falls back)."""
    if context.oauth_metadata and context.oauth_metadata.token_endpoint:
        return str(context.oauth_metadata.token_endpoint)
    return urljoin(context.get_authorization_base_url(context.server_url), "/token")


def endpoint_of(provider: OAuthClientProvider, declared: str) -> Endpoint:
    context = provider.context
    metadata = context.oauth_metadata
    return Endpoint(declared=declared, url=context.server_url, tokenEndpoint=token_endpoint_of(context),
                    resource=resource_of(context), scope=context.client_metadata.scope,
                    issuer=str(metadata.issuer) if metadata else None,
                    issRequired=bool(metadata and metadata.authorization_response_iss_parameter_supported))


def check_issuer(iss: str | None, endpoint: Endpoint) -> None:
    """RFC 9207, as the SDK checks it: a callback's `iss` must name the authorization server the person was sent to."""
    expected = endpoint.get("issuer")
    if iss is not None and expected is not None and iss != expected:
        raise FlowError(f"the authorization came back from {iss}, not from {expected}")
    if iss is None and endpoint.get("issRequired"):
        raise FlowError("the authorization came back without the issuer its server promised to name")


class _Paused(BaseException):
    """Raised where the provider would send a person away: not an error, so the SDK logs nothing."""


def _pausing_provider(*args) -> OAuthClientProvider:
    """The SDK's provider, stopped where it would send a person away."""
    from mcp.client.auth.oauth2 import OAuthClientProvider

    class PausingProvider(OAuthClientProvider):
        async def _perform_authorization(self):  # noqa: ANN202 (the SDK's signature)
            raise _Paused

    return PausingProvider(*args)


@dataclass(frozen=True)
class Started:
    """A flow up to the authorization URL, and what its callback needs to finish it."""
    authorization_url: str
    state: str
    verifier: str
    registration: OAuthClientInformationFull
    endpoint: Endpoint


async def _discover(url: str, provider: OAuthClientProvider) -> None:
    import httpx2  # the HTTP client too: it takes a quarter of a second to import
    from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
    from mcp_types.version import LATEST_PROTOCOL_VERSION

    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": CLIENT_NAME, "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream", MCP_PROTOCOL_VERSION_HEADER: LATEST_PROTOCOL_VERSION}
    async with httpx2.AsyncClient(auth=provider, timeout=TIMEOUT) as http:
        try:
            response = await http.post(url, json=initialize, headers=headers)
        except _Paused:
            return
    raise FlowError(f"{url} did not ask for authorization (it answered {response.status_code} without a token)")


def begin(url: str, declared: str, redirect_uri: str, registration: OAuthClientInformationFull | None) -> Started:
    """Discover the authorization server, register a client (unless `registration` is reused), build the URL.

    Raises FlowError when the server cannot be reached or does not speak OAuth.
    """
    from mcp.client.auth.oauth2 import PKCEParameters

    provider = _pausing_provider(url, client_metadata(redirect_uri), MemoryStorage(registration))
    try:
        asyncio.run(_discover(url, provider))
    except FlowError:
        raise
    except Exception as exc:  # discovery and registration: network errors, refusals, bad metadata
        raise FlowError(f"authorization could not start at {url}: {exc or type(exc).__name__}") from None
    context = provider.context
    if context.client_info is None:
        raise FlowError(f"{url}: no client could be registered with its authorization server")
    if context.oauth_metadata and context.oauth_metadata.authorization_endpoint:
        authorize = str(context.oauth_metadata.authorization_endpoint)
    else:
        authorize = urljoin(context.get_authorization_base_url(url), "/authorize")
    pkce, state = PKCEParameters.generate(), secrets.token_urlsafe(32)
    endpoint = endpoint_of(provider, declared)
    params = {"response_type": "code", "client_id": context.client_info.client_id, "redirect_uri": redirect_uri,
              "state": state, "code_challenge": pkce.code_challenge, "code_challenge_method": "S256",
              **({"resource": endpoint["resource"]} if endpoint["resource"] else {}),
              **({"scope": endpoint["scope"]} if endpoint["scope"] else {})}
    return Started(authorization_url=f"{authorize}?{urlencode(params)}", state=state, verifier=pkce.code_verifier,
                   registration=context.client_info, endpoint=endpoint)


def token_request(token_endpoint: str, registration: OAuthClientInformationFull, data: dict[str, str], *,
                  timeout: float = TIMEOUT) -> OAuthToken:
    """POST a grant to the token endpoint, authenticated as the registration says.

    Raises TokenRefused when the endpoint refuses the grant, FlowError when it
    cannot be reached or answers something else.
    """
    import httpx2  # the HTTP client where a token is asked for (see _discover)
    from mcp.client.auth.oauth2 import OAuthContext
    from mcp.shared.auth import OAuthToken

    context = OAuthContext(server_url=token_endpoint, storage=None, redirect_handler=None, callback_handler=None,
                           client_metadata=client_metadata(str((registration.redirect_uris or ["http://localhost/"])[0])),
                           client_info=registration)
    data, headers = context.prepare_token_auth({"client_id": registration.client_id or "", **data},
                                               {"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with httpx2.Client(timeout=timeout) as http:
            response = http.post(token_endpoint, data=data, headers=headers)
    except httpx2.HTTPError as exc:
        raise FlowError(f"the token endpoint {token_endpoint} could not be reached: {exc}") from None
    if response.status_code in (400, 401):
        raise TokenRefused(f"the token endpoint refused the grant ({response.status_code}: {_oauth_error(response)})")
    if response.status_code != 200:
        raise FlowError(f"the token endpoint answered {response.status_code}")
    try:
        return OAuthToken.model_validate_json(response.content)
    except ValidationError:
        raise FlowError("the token endpoint's answer is not a token response") from None


def _oauth_error(response: httpx2.Response) -> str:
    try:
        return str(response.json().get("error", "")) or "no reason given"
    except ValueError:
        return "no reason given"


def exchange_code(code: str, *, verifier: str, redirect_uri: str, registration: OAuthClientInformationFull,
                  endpoint: Endpoint) -> OAuthToken:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier,
            **({"resource": endpoint["resource"]} if endpoint.get("resource") else {})}
    tokens = token_request(endpoint["tokenEndpoint"], registration, data)
    if tokens.scope is None:
        tokens.scope = endpoint.get("scope")
    return tokens


def refresh_grant(refresh_token: str, registration: OAuthClientInformationFull, endpoint: Endpoint) -> OAuthToken:
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token,
            **({"resource": endpoint["resource"]} if endpoint.get("resource") else {})}
    # Short: other callers needing the token wait for this one's answer (agents.mcpauth.tokens).
    tokens = token_request(endpoint["tokenEndpoint"], registration, data, timeout=REFRESH_TIMEOUT)
    if tokens.refresh_token is None:  # RFC 6749 §6: not rotated, the old one stays good
        tokens.refresh_token = refresh_token
    return tokens
