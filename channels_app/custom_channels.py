"""Custom channel routes: `/<slug>/v1/channels/<id>/...` as `agent/channels/<id>.py` declares them.

One view serves every channel: it finds the agent's channel and the route
by method and path (`:name` segments become `params`), runs the channel's
auth chain (its own, or the server's default), validates the query and the
body with the route's pydantic models (a 400 naming the field, before the
handler runs), then calls the handler with a `RouteRequest`. The handler
returns a dict, a list, a pydantic model, None (204) or a Django response;
an exception in it is a 500 with a generic body, logged here (a session id
that names none of the caller's sessions, `SessionNotFound`, is a 404).

These routes are not in the OpenAPI document: they differ per agent and
release, and `GET /<slug>/v1/info` lists each with its schemas.
"""
from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import connection
from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import extend_schema
from pydantic import BaseModel
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from agents.channels import LoadedChannel, local_dev_strict
from agents.discovery import LoadedAgent, load_deployment
from agents.models import Agent
from agents.secrets.store import acting_for
from channels_app.auth import PolicyChainAuthentication, RequestInfo, authenticate, channel_chain
from channels_app.doors import admit
from channels_app.bodies import validate_body
from channels_app.errors import APIError, error_body, error_response
from channels_app.replies.sessions import SessionLinks
from channels_app.replies.tools import ApprovalDecided, Question
from sessions.turn.admission import AdmissionError
from sessions.custom_channels import ChannelContext, SessionNotFound
from sessions.principal import Principal

log = logging.getLogger(__name__)


@dataclass
class RouteRequest(ChannelContext):
    """What a route handler gets: the validated request and everything a `ChannelContext` offers.

    `request` (the Django request), `headers` (case-insensitive), `body` and `query`
    (instances of the route's models, or None), `raw_body` (the bytes received, to
    check a signature), `params` (the `:name` path segments), `auth` (the principal
    the chain admitted, who `send` acts as unless told otherwise), `request_ip`,
    `dev_loopback` (the server runs `--dev` and the caller is a direct loopback
    one, as `local_dev_strict()` admits: where a webhook channel takes unsigned
    fixtures).
    """

    request: Any = None
    body: Any = None
    raw_body: bytes = b""
    query: Any = None
    params: dict[str, str] = field(default_factory=dict)
    auth: Principal | None = None
    request_ip: str = ""
    dev_loopback: bool = False

    @property
    def headers(self) -> Any:
        return self.request.headers if self.request is not None else {}

    def resolve_approval(self, session_id: str, call_id: str, decision: str, auth: Principal | None = None,
                         reason: str = "") -> dict[str, Any]:
        """Approve or deny a parked tool call of one of this channel's sessions: `{callId, toolName, status}`."""
        row = super().resolve_approval(session_id, call_id, decision, auth=auth, reason=reason)
        return ApprovalDecided.of(row).model_dump(mode="json", by_alias=True)

    def answer_question(self, session_id: str, call_id: str, answer: str, auth: Principal | None = None) -> dict:
        """Answer the model's question in one of this channel's sessions: the question as the HTTP route
        answers it (`{callId, question, options, status, answer, answeredBy, …}`)."""
        row = super().answer_question(session_id, call_id, answer, auth=auth)
        return Question.of(row).model_dump(mode="json", by_alias=True)

    def session_urls(self, session_id: str) -> dict[str, str]:
        """Absolute playground, stream and events URLs of one of this channel's sessions."""
        row = self._session(session_id)
        links = SessionLinks.at((settings.AGENTSITE_PUBLIC_URL or self.base_url).rstrip("/"), self.agent.slug, row.id)
        return {"playgroundUrl": links.playground_url, "streamUrl": links.stream_url, "eventsUrl": links.events_url}


def _refuse(status: int, code: str, message: str, details: Any = None) -> JsonResponse:
    return error_response(status, code, message, details)


def _validated(model: type[BaseModel] | None, data: Any, where: str) -> Any:
    if model is None:
        return None
    return validate_body(model, data, where)


def _query(request: Request) -> dict[str, Any]:
    """Query parameters: a name given once is a string, given again a list of them."""
    return {name: values[0] if len(values) == 1 else values for name, values in request.query_params.lists()}


class ChannelRouteView(APIView):
    # The route's own chain decides, in `handle`; DRF's server-wide chain must not run first.
    authentication_classes: list = []
    permission_classes: list = []

    @property
    def default_response_headers(self) -> dict[str, str]:
        # DRF would name every verb of this view; the route's own 405 says which it takes.
        return {key: value for key, value in super().default_response_headers.items() if key != "Allow"}

    @extend_schema(exclude=True)
    def get(self, request: Request, slug: str, channel_id: str, rest: str = "") -> HttpResponse:
        return self.handle(request, slug, channel_id, rest)

    post = put = patch = delete = get

    def handle(self, request: Request, slug: str, channel_id: str, rest: str) -> HttpResponse:
        with acting_for(slug):  # a handler verifying a signature reads the agent's credentials
            return self._handle(request, slug, channel_id, rest)

    def _handle(self, request: Request, slug: str, channel_id: str, rest: str) -> HttpResponse:
        agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
        if agent is None or agent.active_deployment is None:
            return _refuse(404, "not_found", f"there is no agent {slug!r} on this server")
        loaded = load_deployment(agent.active_deployment)
        channel = loaded.channels.get(channel_id)
        if channel is None:
            return _refuse(404, "channel_not_found", f"agent {slug!r} has no channel {channel_id!r}")
        parts = [p for p in rest.split("/") if p]
        matches = [(route, params) for route in channel.routes if (params := route.match(parts)) is not None]
        if not matches:
            return _refuse(404, "route_not_found", f"channel {channel_id!r} has no route /{'/'.join(parts)}")
        method = "GET" if request.method == "HEAD" else request.method
        chosen = next(((r, p) for r, p in matches if r.method == method), None)
        if chosen is None:
            allowed = sorted({r.method for r, _ in matches})
            response = _refuse(405, "method_not_allowed", f"{request.method} is not a method of this route "
                                                          f"(it takes {', '.join(allowed)})")
            response["Allow"] = ", ".join(allowed)
            return response
        route, params = chosen

        try:  # the channel's own chain, through the door every route has
            principal = admit(RequestInfo.from_django(request._request), slug=slug,
                              chain=channel_chain(channel.channel.auth))
        except APIError as exc:
            return exc.response()
        try:
            # Read first, so the handler can verify a provider's signature over the exact bytes (and before
            # the CSRF check, which reads a form's fields: the bytes would be gone after it).
            raw_body = request._request.body
        except RequestDataTooBig:
            return _refuse(413, "body_too_large", "the request body is too large")
        if principal.authenticator == "django" and "token" not in principal.attributes:
            try:  # a browser's cookie rides along cross-site: a login needs the CSRF token
                PolicyChainAuthentication().enforce_csrf(request)
            except exceptions.PermissionDenied as exc:
                return _refuse(403, "forbidden", str(exc.detail))
        try:
            query = _validated(route.query, _query(request), "query")
            body = None
            if route.body is not None and not route.raw:
                data = request.data  # parsed by the bounded JSON parser: 415 / 400 / 413 as every route
                # an empty body is the empty object, so a route whose fields are all optional takes none
                body = _validated(route.body, {} if data in (None, "", {}, []) else data, "body")
        except APIError as exc:
            return exc.response()
        except exceptions.UnsupportedMediaType:
            return _refuse(415, "unsupported_media_type", "send the body as application/json")
        except exceptions.ParseError as exc:
            return _refuse(400, "invalid_json", f"the body is not valid JSON: {exc.detail}")
        except exceptions.APIException as exc:
            return _refuse(exc.status_code, exc.default_code, str(exc.detail))

        mount(agent, loaded)
        args = RouteRequest(agent=agent, channel_id=channel.id, principal=principal, base_url=base_url(request),
                            request=request._request, body=body, raw_body=raw_body, query=query, params=params,
                            auth=principal,
                            request_ip=request._request.META.get("REMOTE_ADDR", ""),
                            dev_loopback=settings.AGENTSITE_DEV and _local_caller(request._request))
        try:
            result = route.handler(args)
        except AdmissionError as exc:
            return _refuse(exc.status, exc.code, exc.message, exc.details)
        except SessionNotFound as exc:  # a session id the caller named: not one it can reach
            return _refuse(404, "session_not_found", str(exc))
        except Exception:
            log.exception("channel %s/%s: the handler of %s %s failed", slug, channel.id, route.method, route.path)
            return _refuse(500, "internal_error", "the channel's handler failed")
        return render(result)


def _local_caller(request: Any) -> bool:
    return authenticate(RequestInfo.from_django(request), channel_chain([local_dev_strict()])) is not None


def base_url(request: Request) -> str:
    return settings.AGENTSITE_PUBLIC_URL.rstrip("/") or request.build_absolute_uri("/").rstrip("/")


def render(result: Any) -> HttpResponse:
    if isinstance(result, HttpResponse):
        return result
    if result is None:
        return HttpResponse(status=204)
    if isinstance(result, BaseModel):
        return JsonResponse(result.model_dump(mode="json", by_alias=True), safe=False)
    try:
        return JsonResponse(result, safe=False)
    except TypeError:
        log.exception("a channel handler returned %r, which is not JSON", type(result))
        return JsonResponse(error_body("internal_error", "the channel's handler failed"), status=500)


# -- on_start / on_stop --------------------------------------------------------------

_mounted: dict[tuple[int, str], LoadedChannel] = {}
_mount_lock = threading.Lock()


def mount(agent: Agent, loaded: LoadedAgent) -> None:
    """Run each channel's `on_start(ctx)` once per process and release (on the first request that
    reaches one of the agent's channels, or `mount_all` at startup); `on_stop()` runs at exit."""
    deployment = agent.active_deployment_id
    with _mount_lock:
        fresh = [c for c in loaded.channels.values() if (deployment, c.id) not in _mounted]
        for c in fresh:
            _mounted[(deployment, c.id)] = c
    for c in fresh:
        if c.channel.on_start is None:
            continue
        try:
            with acting_for(agent.slug):
                c.channel.on_start(ChannelContext(agent=agent, channel_id=c.id,
                                                  base_url=settings.AGENTSITE_PUBLIC_URL.rstrip("/")))
        except Exception:
            log.exception("on_start of channel %s/%s failed", agent.slug, c.id)


def mount_all() -> None:
    """Mount the channels of every deployed agent (the web process calls it as it starts)."""
    try:
        agents = list(Agent.objects.select_related("active_deployment").exclude(active_deployment=None))
        for agent in agents:
            try:
                mount(agent, load_deployment(agent.active_deployment))
            except Exception:
                log.exception("cannot mount the channels of %s", agent.slug)
    except Exception:
        log.exception("cannot mount the custom channels")
    finally:
        connection.close()  # this thread's own connection


@atexit.register
def unmount_all() -> None:
    """`on_stop()` of every mounted channel, once."""
    with _mount_lock:
        mounted = list(_mounted.values())
        _mounted.clear()
    for c in mounted:
        if c.channel.on_stop is None:
            continue
        try:
            c.channel.on_stop()
        except Exception:
            log.exception("on_stop of channel %s failed", c.id)
