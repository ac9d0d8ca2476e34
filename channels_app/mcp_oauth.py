"""The playground's OAuth button: an operator authorizes an agent's MCP server from the browser.

`POST /playground/<slug>/mcp/<name>/authorize` discovers the server's
authorization server, registers a client (or reuses the one registered for
this redirect URI), keeps the flow in an `OAuthFlow` row and sends the
browser to the authorization URL. The authorization server sends it back to
`GET /playground/<slug>/mcp-oauth/callback`, on any web process: the flow is
claimed once by its state (unexpired), the code exchanged, the tokens stored
as the agent's secrets, and the browser returned to the agent's page.
Both routes are for operators only: the tokens act for the agent, whoever talks to it.
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from agents.mcpauth.flows import FlowError, begin, check_issuer, exchange_code, reusable_registration
from agents.mcpauth.stored import NotDeclared, declared_server, save_authorization, server_url
from agents.models import Agent, OAuthFlow
from channels_app.doors import admit_page, error_page, server_door
from channels_app.playground import _agent

# The tokens act for the agent, whoever talks to it: as its secrets, operators only, no scoped token.
AUTHORIZING = server_door("authorizing an agent's MCP server")


def _operator_agent(request: HttpRequest, slug: str) -> tuple[Agent | None, str, HttpResponse | None]:
    principal = admit_page(request, AUTHORIZING, slug)
    if isinstance(principal, HttpResponse):
        return None, "", principal
    agent = _agent(slug)
    if agent is None or agent.active_deployment is None:
        return None, "", error_page(request, 404, "No such agent", f"There is no agent {slug!r} on this server.")
    return agent, principal.principal_id, None


def callback_uri(request: HttpRequest, slug: str) -> str:
    """Where the authorization server sends the browser back: the server's public URL, else this request's host."""
    base = (settings.AGENTSITE_PUBLIC_URL or request.build_absolute_uri("/")).rstrip("/")
    return base + reverse("playground-mcp-oauth-callback", args=[slug])


@require_POST
def authorize_view(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    agent, who, refusal = _operator_agent(request, slug)
    if refusal:
        return refusal
    try:
        declared = declared_server(agent, name)["url"]
        url = server_url(agent, declared)
    except NotDeclared as exc:
        return error_page(request, 404, "No such OAuth server", str(exc))
    redirect_uri = callback_uri(request, slug)
    try:
        started = begin(url, declared, redirect_uri, reusable_registration(agent, name, declared, redirect_uri))
    except FlowError as exc:
        return error_page(request, 502, "Authorization could not start", str(exc))
    OAuthFlow.begin(agent, name, state=started.state, verifier=started.verifier,
                    registration=started.registration.model_dump_json(exclude_none=True), redirect_uri=redirect_uri,
                    token_endpoint=started.endpoint["tokenEndpoint"], endpoint=dict(started.endpoint), by=who)
    return HttpResponseRedirect(started.authorization_url)


@require_GET
def callback_view(request: HttpRequest, slug: str) -> HttpResponse:
    agent, who, refusal = _operator_agent(request, slug)
    if refusal:
        return refusal
    flow = OAuthFlow.claim(agent, request.GET.get("state", ""))
    if flow is None:
        return error_page(request, 400, "Unknown authorization", "This authorization was not started here, was "
                       "already used or is older than ten minutes: start it again from the agent's page.")
    code = request.GET.get("code", "")
    if not code:
        why = " ".join(filter(None, [request.GET.get("error", ""), request.GET.get("error_description", "")]))
        return error_page(request, 400, "Authorization refused", f"The authorization server sent no code: "
                       f"{why or 'no reason given'}.")
    from mcp.shared.auth import OAuthClientInformationFull  # the SDK where it is used (agents.mcpauth.flows)

    registration = OAuthClientInformationFull.model_validate_json(flow.registration())
    try:
        check_issuer(request.GET.get("iss"), flow.endpoint)
        tokens = exchange_code(code, verifier=flow.verifier(), redirect_uri=flow.redirect_uri,
                               registration=registration, endpoint=flow.endpoint)
    except FlowError as exc:
        return error_page(request, 502, "Authorization failed", str(exc))
    save_authorization(agent, flow.server, tokens=tokens, registration=registration, endpoint=flow.endpoint,
                       by=who or "playground")
    return HttpResponseRedirect(f"/playground/{slug}?{urlencode({'authorized': flow.server})}")


urlpatterns = [
    path("playground/<slug:slug>/mcp/<str:name>/authorize", authorize_view, name="playground-mcp-oauth"),
    path("playground/<slug:slug>/mcp-oauth/callback", callback_view, name="playground-mcp-oauth-callback"),
]
