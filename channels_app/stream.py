"""The live event stream over HTTP: NDJSON, or SSE with Last-Event-ID; and one turn's
events as the answer of the request that started it (`turn_stream`).

Only the translation: access is checked as everywhere (channels_app.ownership),
and the replay-then-follow of the log is sessions.eventlog.follow's.
"""
from __future__ import annotations

import json
from contextlib import aclosing
from typing import AsyncIterator

from channels.db import database_sync_to_async
from django.http import StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from channels_app.auth import RequestInfo
from channels_app.doors import admit
from channels_app.errors import APIError, error_response
from channels_app.ownership import check_reader
from channels_app.parsers import parse_start_index
from sessions.eventlog.events import TERMINAL_TYPES, Line
from sessions.eventlog.follow import follow_events
from sessions.metrics.families import stream_closed, stream_opened
from sessions.models import Event, EventType, Session, Turn


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
    try:
        principal = admit(RequestInfo.from_django(request), slug=slug)
    except APIError as exc:
        return exc.response()
    sse = "text/event-stream" in request.headers.get("Accept", "")
    try:
        start = parse_start_index(request.GET.get("startIndex"), request.headers.get("Last-Event-ID"), resume=sse)
    except APIError as exc:
        return exc.response()
    try:
        mode = check_reader(slug, session_id, principal)
    except APIError as exc:
        return exc.response()
    return _streaming(follow_events(session_id, start, mode), "sse" if sse else "ndjson")


def _streaming(events: AsyncIterator[list[Line]], form: str) -> StreamingHttpResponse:
    sse = form == "sse"
    response = StreamingHttpResponse(
        _sse(events) if sse else _ndjson(events),
        content_type="text/event-stream" if sse else "application/x-ndjson",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


# --- one turn in the answer of the request that started it --------------------------------

def streamed_form(accept: str) -> str | None:
    """"sse" or "ndjson" when the caller asked for the new turn's events in the answer
    (POST /session, POST .../message); None: the JSON answer."""
    if "text/event-stream" in accept:
        return "sse"
    if "application/x-ndjson" in accept:
        return "ndjson"
    return None


def turn_stream(form: str, session: Session, turn_id: str, start: int, token: str) -> StreamingHttpResponse:
    """200 with the events of turn `turn_id` from index `start` to that turn's end.

    The turn runs on a worker whatever the client does: a client that leaves only stops its reading.
    """
    response = _streaming(one_turn(session.id, start, turn_id, session.mode), form)
    response["X-Session-Id"] = session.id
    response["X-Continuation-Token"] = token
    return response


def follow_up_start(session_id: str, turn_id: str) -> int:
    """Where a follow-up's turn begins in the log: the log's end once the message was admitted,
    or the turn's first event if it has already written some (turns run at once in this
    process under AGENTSITE_INLINE_TURNS). The end is read first: events the turn writes
    between the two reads are at or after it."""
    end = Session.objects.filter(pk=session_id).values_list("next_event_index", flat=True).first() or 0
    first = Event.objects.filter(session_id=session_id, turn_id=turn_id).order_by("index") \
        .values_list("index", flat=True).first()
    return end if first is None else min(first, end)


def _turn_of(line: Line) -> str | None:
    return json.loads(line.json).get("turnId")


@database_sync_to_async
def _parked(turn_id: str) -> bool:
    return Turn.objects.filter(pk=turn_id, status=Turn.Status.AWAITING_APPROVAL).exists()


async def one_turn(session_id: str, start: int, turn_id: str, mode: str) -> AsyncIterator[list[Line]]:
    """follow_events, up to the end of one turn: its session.waiting, session.completed or
    session.failed, or its park for approval (the turn waits for a decision, and then for a
    reader of the stream route). Another turn's ending (a preempted one) does not end it.

    A park's events and the turn's parked status commit together, so once the reader has
    seen the turn ask for approval it asks the turn's status after each batch.
    """
    asked = False
    async with aclosing(follow_events(session_id, start, mode)) as batches:
        async for batch in batches:
            for at, line in enumerate(batch):
                if line.type in TERMINAL_TYPES and _turn_of(line) == turn_id:
                    yield batch[:at + 1]
                    return
                if line.type == EventType.ACTION_APPROVAL_REQUESTED and _turn_of(line) == turn_id:
                    asked = True
            yield batch
            if asked and await _parked(turn_id):
                return
