"""Who may come in: the one admission rule of every route, page and socket.

Each surface names its `Door` (what it asks of a caller) and calls `admit`,
or `check` where DRF has run the auth chain already. In order: the Host must
be one the server serves (400, as Django answers HTTP); the chain names the
principal (none: 401); an operators' door wants an operator or the loopback
caller (anonymous: 401, anyone else: 403 `operators_only`); then a personal
token's agent scope: 403 `scoped_token` for an agent outside it, and on a door
that covers every agent or manages the server. A refusal is an `APIError`, answered
by one function per kind of surface: `APIError.response` (JSON, every route),
`refusal_page` (a login redirect or a page), `refuse_socket` (a close code).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.shortcuts import render
from rest_framework import permissions

from channels_app.auth import LOCAL_PRINCIPAL, Policy, Principal, RequestInfo, agent_scope, authenticate
from channels_app.errors import APIError, unauthorized
from channels_app.lockout import TooManyFailures
from sessions.plumbing import logcontext


class Scope(enum.Enum):
    """What a door does with a personal token scoped to some agents."""

    AGENT = "agent"  # an agent's route: the agent in the path must be in the scope
    FILTERED = "filtered"  # admitted; the answer names the scope's agents only
    REFUSED = "refused"  # refused: the answer covers every agent, or manages the server


@dataclass(frozen=True)
class Door:
    operators: bool = False
    scope: Scope = Scope.AGENT
    # What the door guards, for the refusal's message ("the server's metrics").
    what: str = "this route"


AGENT = Door()
LISTING = Door(scope=Scope.FILTERED, what="this list")
OWN_ACCOUNT = Door(scope=Scope.REFUSED, what="personal tokens")


def server_door(what: str) -> Door:
    """The door of a route that manages the server or covers every agent: operators only, and
    no token scoped to some agents; `what` names it in the refusal ("the server's metrics")."""
    return Door(operators=True, scope=Scope.REFUSED, what=what)


def every_session_refused() -> APIError:
    """`?all=1` (every principal's sessions) asked by someone who is not an operator."""
    return APIError(403, "operators_only", "all=1 lists every principal's sessions: only operators "
                                          "(staff and members of the operators group) may ask for it")


def host_allowed(host: str) -> bool:
    """Whether Django would serve an HTTP request naming `host` (its ALLOWED_HOSTS, read now)."""
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _ = split_domain_port(host)
    if not domain:  # no Host header (HTTP/1.0, a test's socket): only where any host is served
        return "*" in allowed
    return validate_host(domain, allowed)


def is_operator(principal: Principal) -> bool:
    """Operators, and the loopback caller of the embedded default (whoever sits at the server)."""
    return principal.operator or principal == LOCAL_PRINCIPAL


def check(principal: Any, door: Door = AGENT, slug: str | None = None) -> Principal:
    """`principal` (the chain's answer, None if no policy admitted the caller) if `door` lets it in."""
    if not isinstance(principal, Principal):
        raise unauthorized()
    if door.operators and not is_operator(principal):
        if principal.principal_type == "anonymous":
            raise unauthorized("authentication required: log in as an operator, or send an "
                               "operator's personal token")
        raise APIError(403, "operators_only", f"only operators (staff and members of the operators group) may "
                                              f"reach {door.what}")
    scope = agent_scope(principal)
    if scope is not None:
        if slug is not None and slug not in scope:
            raise APIError(403, "scoped_token", f"this personal token is not scoped to agent {slug!r}")
        if door.scope is Scope.REFUSED:
            raise APIError(403, "scoped_token", f"a personal token scoped to some agents cannot reach {door.what}")
    # Who was let in, on the request's log lines and its access line (channels_app.access_log).
    logcontext.note(principalId=principal.principal_id)
    return principal


def admit(info: RequestInfo, door: Door = AGENT, slug: str | None = None,
          chain: Sequence[Policy] | None = None) -> Principal:
    """The principal `door` admits for the request `info` describes, else the APIError saying why not."""
    if not host_allowed(info.host):
        raise APIError(400, "disallowed_host", f"this server does not serve the host {info.host!r}")
    return check(authenticate(info, chain), door, slug)


class HasPrincipal(permissions.BasePermission):
    """DRF's side of `check`: the view's `door` (AGENT unless it names one), the path's agent."""

    def has_permission(self, request, view) -> bool:
        # A view may keep a method behind another door (`doors`): GET /v1/agents lists, its POST creates.
        door = getattr(view, "doors", {}).get(request.method.lower()) or getattr(view, "door", AGENT)
        if not hasattr(view, request.method.lower()):
            door = AGENT  # a method the route lacks: 405 for anyone the chain admits, whatever the route's door
        check(request.user, door, view.kwargs.get("slug"))
        return True


# A page's title for each refusal: the page says what the JSON's code says.
PAGE_TITLES = {
    "operators_only": "Operators only",
    "scoped_token": "Outside this token's scope",
    "disallowed_host": "Unknown host",
    "forbidden": "Not your session",  # channels_app.ownership: another principal's session
}


def error_page(request: HttpRequest, status: int, title: str, detail: str) -> HttpResponse:
    """The page every refusal and error of the playground's pages shows."""
    return render(request, "playground/error.html", {"title": title, "detail": detail, "status": status},
                  status=status)


def refusal_page(request: HttpRequest, exc: APIError) -> HttpResponse:
    """A refusal as a person sees it: no policy admitted them, they log in and come back; a
    locked-out client, how long to wait (with Retry-After); else a page saying why."""
    if exc.status_code == 401:
        return redirect_to_login(request.get_full_path())
    if exc.status_code == 429 and isinstance(exc, TooManyFailures):
        response = render(request, "accounts/locked_out.html",
                          {"retry_after": exc.retry_after, "minutes": math.ceil(exc.retry_after / 60),
                           "login_url": request.get_full_path(), "tokens": True}, status=429)
    else:
        response = error_page(request, exc.status_code, PAGE_TITLES.get(exc.error_code, "Not allowed"), exc.message)
    for name, value in exc.headers.items():
        response[name] = value
    return response


async def refuse_socket(consumer: Any, exc: APIError) -> None:
    """A refusal on a websocket, accepted so the page can read why: closed with 4000 + the HTTP
    status the same request would get (4401, 4403, 4404, 4400); a locked-out client is first
    told when to come back, in an error frame with `retryAfter`, then closed as 4429."""
    if isinstance(exc, TooManyFailures):
        await consumer.send_error(exc.error_code, exc.message, exc.details)
    await consumer.close(code=4000 + exc.status_code)


def admit_page(request: HttpRequest, door: Door = AGENT, slug: str | None = None) -> Principal | HttpResponse:
    """`admit` for a page: the principal, or the response that refuses it."""
    try:
        return admit(RequestInfo.from_django(request), door, slug)
    except APIError as exc:
        return refusal_page(request, exc)


def admitted_page(view: Callable[..., HttpResponse], door: Door) -> Callable[..., HttpResponse]:
    """`view` behind `door`, for pages whose app sits below this one (the dashboard) or that are
    not ours (the API document's viewer); the admitted principal is `request.principal`."""

    def page(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        admitted = admit_page(request, door, kwargs.get("slug"))
        if isinstance(admitted, HttpResponse):
            return admitted
        request.principal = admitted
        return view(request, *args, **kwargs)

    page.__name__ = getattr(view, "__name__", "page")
    page.__doc__ = view.__doc__
    return page
