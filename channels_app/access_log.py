"""One access line per request, under AGENTSITE_LOG_FORMAT=json, in place of the web server's own.

An ASGI wrapper rather than a middleware: only it sees a stream end (a
session's NDJSON stream lasts as long as its client reads, long after the
view returned its response), a client that left before any answer, and the
requests Django answers before its middleware runs (a body over the size
limit). What only Django knows, the route matched and who was admitted, the
middleware `note_the_request` leaves in the request's ASGI scope under
`NOTES`. A websocket gets its line when the connection ends (its length is
the connection's): `status` 101 once accepted, 403 if refused before, and
the close code. No path, query string or header is written: they may carry
what a caller typed (a token in a query); the route names the endpoint.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from channels_app.metrics import route_of
from channels_app.request_log import SESSION_IN_PATH
from channels_app.routing import websocket_urlpatterns
from sessions import tracing
from sessions.plumbing import logcontext

log = logging.getLogger("agentsite.access")

# The scope key under which the middleware leaves what Django learned of the request.
NOTES = "agentsite.access"
# The context's ids an access line takes from the request's scope (sessions.plumbing.logcontext).
NOTED_IDS = ("sessionId", "principalId")


def logged(app):
    """`app` with an access line written as each HTTP request or websocket connection ends."""

    async def application(scope: dict[str, Any], receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await app(scope, receive, send)
        started = time.monotonic()
        seen: dict[str, Any] = {"status": None}
        notes: dict[str, Any] = {}
        scope[NOTES] = notes

        async def sending(message: dict[str, Any]) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                seen["status"] = message["status"]
            elif kind == "websocket.accept":
                seen["status"] = 101
            elif kind == "websocket.close":
                seen["status"] = seen["status"] or 403  # closed before accepting: the handshake is refused
                seen.setdefault("closeCode", message.get("code", 1000))
            await send(message)

        # A scope of its own: the ids noted while the connection is served (its principal) end with it.
        with logcontext.about():
            trace_id = tracing.trace_id()  # inside the request's span when tracing is on
            try:
                await app(scope, receive, sending)
            finally:
                if scope["type"] == "websocket":
                    notes.update(_websocket_notes(scope))
                _write(scope, seen, notes, trace_id, started)

    return application


def _note(notes: dict[str, Any], request: HttpRequest, response: HttpResponse) -> None:
    """Inside `request_log.name_the_session`'s block, whose ids (the session, the principal) end with it."""
    ids = logcontext.current()
    notes.update(route=route_of(request, response.status_code), **{k: ids[k] for k in NOTED_IDS if k in ids})


@sync_and_async_middleware
def note_the_request(get_response):
    """The route and ids of a request, for its access line (nothing to do when `logged` is off)."""
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest):
            response = await get_response(request)
            if (notes := getattr(request, "scope", {}).get(NOTES)) is not None:
                _note(notes, request, response)
            return response
    else:
        def middleware(request: HttpRequest):
            response = get_response(request)
            if (notes := getattr(request, "scope", {}).get(NOTES)) is not None:
                _note(notes, request, response)
            return response
    return middleware


def _websocket_notes(scope: dict[str, Any]) -> dict[str, Any]:
    """A websocket's route and ids: channels routes it outside Django's resolver and the middleware."""
    path = scope.get("path", "")
    route = next((str(p.pattern) for p in websocket_urlpatterns if p.pattern.match(path.lstrip("/"))), None)
    found = SESSION_IN_PATH.search(path)
    ids = logcontext.current()  # the consumer's admission noted its principal in this task's context
    return {"route": route, **({"sessionId": found.group(1)} if found else {}),
            **({"principalId": ids["principalId"]} if "principalId" in ids else {})}


def _write(scope: dict[str, Any], seen: dict[str, Any], notes: dict[str, Any], trace_id: str,
           started: float) -> None:
    method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
    fields = {
        "method": method,
        "route": notes.get("route"),
        "status": seen["status"],
        "durationMs": round((time.monotonic() - started) * 1000, 1),
        "principalId": notes.get("principalId"),
        **({"sessionId": notes["sessionId"]} if notes.get("sessionId") else {}),
        **({"closeCode": seen["closeCode"]} if "closeCode" in seen else {}),
        **({"traceId": trace_id} if trace_id else {}),
    }
    log.info("%s %s %s", method, fields["route"] or "-", fields["status"] or "-",
             extra={logcontext.FIELDS: fields})
