"""The live event stream over HTTP: NDJSON, or SSE with Last-Event-ID.

Only the translation: access is checked as everywhere (channels_app.ownership),
and the replay-then-follow of the log is sessions.follow's.
"""
from __future__ import annotations

from typing import AsyncIterator

from django.http import StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from channels_app.auth import RequestInfo, authenticate, check_scope
from channels_app.errors import APIError, error_response
from channels_app.ownership import check_reader
from channels_app.parsers import parse_start_index
from sessions.events import Line
from sessions.follow import follow_events
from sessions.metrics import stream_closed, stream_opened


async def _ndjson(batches: AsyncIterator[list[Line]]) -> AsyncIterator[bytes]:
    # An empty first chunk makes daphne send the status and headers now: without
    # it a stream opened on an idle session answers nothing until the next event,
    # and clients waiting for the response headers time out.
    yield b""
    stream_opened("ndjson")
    try:
        async for batch in batches:  # one write per batch, not per event: a replay is a few large writes
            yield "".join(f"{line.json}\n" for line in batch).encode()
    finally:  # the client left (CancelledError here) or the session ended
        stream_closed("ndjson")


async def _sse(batches: AsyncIterator[list[Line]]) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    stream_opened("sse")
    try:
        async for batch in batches:
            yield "".join(f"id: {line.index}\nevent: {line.type}\ndata: {line.json}\n\n" for line in batch).encode()
    finally:
        stream_closed("sse")


@csrf_exempt  # GET only: any other method gets the JSON 405 below, not Django's CSRF page
def stream_view(request, slug: str, session_id: str):
    # A sync view: it runs on the request's thread with the middleware (agentsite.threads),
    # so its one query needs no crossing; the stream itself is async and runs on the event loop.
    if request.method != "GET":
        response = error_response(405, "method_not_allowed", f"{request.method} is not allowed here; use GET")
        response["Allow"] = "GET"
        return response
    principal = authenticate(RequestInfo.from_django(request))
    if principal is None:
        response = error_response(401, "unauthorized", "authentication required: no auth policy admitted this request")
        response["WWW-Authenticate"] = 'Bearer realm="agentsite"'
        return response
    if not check_scope(principal, slug):
        return error_response(403, "forbidden", "this personal token is not scoped to this agent")
    sse = "text/event-stream" in request.headers.get("Accept", "")
    try:
        start = parse_start_index(request.GET.get("startIndex"), request.headers.get("Last-Event-ID"), resume=sse)
    except APIError as exc:
        return error_response(exc.status_code, exc.error_code, exc.message)
    try:
        mode = check_reader(slug, session_id, principal)
    except APIError as exc:
        return error_response(exc.status_code, exc.error_code, exc.message)
    events = follow_events(session_id, start, mode)
    response = StreamingHttpResponse(
        _sse(events) if sse else _ndjson(events),
        content_type="text/event-stream" if sse else "application/x-ndjson",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
