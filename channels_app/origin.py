"""Cross-site requests: a page on another site may not change anything here.

A browser sends requests on behalf of whatever page it shows: to loopback
(which the default auth chain trusts) and with the cookies of an admin login.
Browsers name the page's origin in `Origin` (or at least `Referer`), so a
state-changing request (POST, PUT, PATCH, DELETE) whose origin is not this
server's own is refused with 403 `foreign_origin`, whatever the auth chain.
A request with neither header is not from a page (curl, integrations, other
servers) and goes on to the auth chain.

"Own" means the same scheme, host and port as the request's `Host`, read as
the auth policies read it (forwarding headers are not trusted). Behind a
reverse proxy that terminates TLS or rewrites `Host`, list the public origin
in `AGENTSITE_TRUSTED_ORIGINS` or set `AGENTSITE_PUBLIC_URL`: both feed
Django's CSRF_TRUSTED_ORIGINS (and its format), which this guard reads.

Bodies are JSON only: routes that read one answer 415 to any other type
(DRF's JSON-only parser, see settings). Routes that take no body (stop,
DELETE, the dev fire routes) ignore one; a cross-site form reaching them is
refused here by its Origin.
"""
from __future__ import annotations

import logging
from typing import Mapping
from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from channels_app.doors import host_allowed
from channels_app.errors import error_response

log = logging.getLogger("django.security.DisallowedHost")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
DEFAULT_PORTS = {"http": 80, "https": 443}
WEBSOCKET_SCHEMES = {"ws": "http", "wss": "https"}

Origin = tuple[str, str, int]  # scheme, host, port


def parse_origin(value: str) -> Origin | None:
    """The (scheme, host, port) of an Origin value or a URL; None for `null` or anything unusable."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _matches(origin: Origin, entry: str) -> bool:
    """Django's CSRF_TRUSTED_ORIGINS semantics: exact, or `https://*.example.com` for subdomains."""
    wildcard = "://*." in entry
    trusted = parse_origin(entry.replace("://*.", "://", 1) if wildcard else entry)
    if trusted is None or (origin[0], origin[2]) != (trusted[0], trusted[2]):
        return False
    return origin[1] == trusted[1] or (wildcard and origin[1].endswith("." + trusted[1]))


def foreign_source(scheme: str, host: str, headers: Mapping[str, str]) -> str | None:
    """The Origin (or Referer) naming another site than `scheme://host`, if the request has one.

    `headers` are lower-cased names. Returns None for a same-origin or trusted
    request and for one that names no origin at all.
    """
    claimed = headers.get("origin")
    if claimed is None:
        claimed = headers.get("referer")
    if claimed is None:
        return None
    origin = parse_origin(claimed)
    if origin is not None:
        if origin == parse_origin(f"{scheme}://{host}"):
            return None
        if any(_matches(origin, entry) for entry in settings.CSRF_TRUSTED_ORIGINS):
            return None
    return claimed


def foreign_websocket_origin(scope: Mapping) -> str | None:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    scheme = WEBSOCKET_SCHEMES.get(scope.get("scheme", "ws"), "http")
    return foreign_source(scheme, headers.get("host", ""), headers)


class AllowedHostsValidator:
    """The websocket side of Django's ALLOWED_HOSTS: a handshake naming a `Host` the server would
    answer 400 over HTTP is denied (the client sees 403) before any consumer or auth policy runs,
    so a socket is never the loopback principal where the same HTTP request is refused.

    Channels' `AllowedHostsOriginValidator` checks `Origin` against the list; the consumer checks
    `Origin` against the host already (`foreign_websocket_origin`): this checks the host itself.
    It sits inside `behind_trusted_proxies`, so behind a trusted proxy it checks the forwarded host.
    """

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"host"), "")
            if not host_allowed(host):
                log.warning("websocket refused: the host %r is not in ALLOWED_HOSTS", host[:200])
                return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)


def _headers(request: HttpRequest) -> dict[str, str]:
    return {name: request.META[key] for name, key in (("origin", "HTTP_ORIGIN"), ("referer", "HTTP_REFERER"))
            if key in request.META}


def refuse_foreign(request: HttpRequest) -> HttpResponse | None:
    if request.method in SAFE_METHODS:
        return None
    source = foreign_source(request.scheme, request.META.get("HTTP_HOST", ""), _headers(request))
    if source is None:
        return None
    return error_response(403, "foreign_origin", foreign_origin_message(source), {"origin": source})


def foreign_origin_message(source: str) -> str:
    return (f"cross-site request refused: it comes from {source!r}, not from this server; "
            "list trusted origins in AGENTSITE_TRUSTED_ORIGINS")


@sync_and_async_middleware
def cross_site_guard(get_response):
    """Refuses foreign-origin writes on every route, before anything acts on them.

    Async-capable, so streaming views pay no thread hop for it.
    """
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest) -> HttpResponse:
            refused = refuse_foreign(request)
            return refused if refused is not None else await get_response(request)
    else:
        def middleware(request: HttpRequest) -> HttpResponse:
            refused = refuse_foreign(request)
            return refused if refused is not None else get_response(request)
    return middleware
