"""The live event stream: replay from startIndex, then follow.

The reader subscribes to the session's wake-up group before it replays, so
nothing written between the replay and the subscription is missed; after
every wake-up or poll timeout it re-reads the table from the next index it
has not sent, so it never repeats or skips an index. It polls fast while a
turn runs (a worker in another process may not be able to wake it) and
slowly while the session is idle.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncIterator

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.http import StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from channels_app.auth import RequestInfo, authenticate
from channels_app.errors import APIError, error_response
from channels_app.ownership import get_owned_session
from channels_app.parsers import parse_start_index
from sessions import wakeups
from sessions.events import TERMINAL_TYPES, read_events
from sessions.models import Event, Session

# After a wake-up, poll fast for a while even if the log looks idle: a
# follow-up was just admitted and its turn has not written anything yet.
FAST_AFTER_WAKEUP_SECONDS = 2.0
BATCH = 500

log = logging.getLogger(__name__)


@database_sync_to_async
def _read(session_id: str, start: int) -> list[dict[str, Any]]:
    return read_events(session_id, start, BATCH)


@database_sync_to_async
def _type_before(session_id: str, index: int) -> str:
    """The type of the last event before `index` ("" if none): where a resumed reader stands."""
    earlier = Event.objects.filter(session_id=session_id, index__lt=index).order_by("-index")
    return earlier.values_list("type", flat=True).first() or ""


@database_sync_to_async
def _session_state(session_id: str) -> tuple[str, str] | None:
    row = Session.objects.filter(pk=session_id).values_list("mode", "status").first()
    return row


async def follow_events(session_id: str, start: int) -> AsyncIterator[dict[str, Any]]:
    """Yield envelopes from `start` on, live, until the caller stops iterating.

    Ends by itself when the session is deleted or a task session has ended.
    """
    await wakeups.listen_for_other_processes()
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(wakeups.group_name(session_id), channel)
    wakeup: asyncio.Future | None = None
    try:
        next_index = start
        fast_until = 0.0
        next_gone_check = 0.0
        state = await _session_state(session_id)
        if state is None:
            return
        mode = state[0]
        # A reader resumed past the end (Last-Event-ID of the final event) must
        # still see that the session is idle or, for a task, over.
        last_type = await _type_before(session_id, start)
        while True:
            events = await _read(session_id, next_index)
            for event in events:
                yield event
                next_index = event["index"] + 1
                last_type = event["type"]
            if len(events) == BATCH:
                continue
            if mode == Session.Mode.TASK and last_type in ("session.completed", "session.failed"):
                return
            idle = last_type in TERMINAL_TYPES and time.monotonic() > fast_until
            timeout = settings.AGENTSITE_STREAM_POLL_IDLE if idle else settings.AGENTSITE_STREAM_POLL_RUNNING
            # One receive stays pending across polls instead of being cancelled by
            # each poll timeout: channels_redis takes a cancelled receive for a
            # consumer that left, and a cancel landing in its Redis read can be
            # swallowed, stalling the reader until the read timeout raises.
            if wakeup is None:
                wakeup = asyncio.ensure_future(layer.receive(channel))
                wakeup.add_done_callback(_retrieve)
            done, _ = await asyncio.wait([wakeup], timeout=timeout)
            if done:
                error = None if wakeup.cancelled() else wakeup.exception()
                wakeup = None
                if error is not None:
                    # Wake-ups are hints: keep polling the table, at the poll pace.
                    log.debug("wake-up receive failed on session %s: %r", session_id, error)
                    await asyncio.sleep(timeout)
                else:
                    fast_until = time.monotonic() + FAST_AFTER_WAKEUP_SECONDS
            else:
                # A session deleted mid-turn never writes a terminal event, so look
                # for deletion while running too, but no oftener than the idle poll.
                now = time.monotonic()
                if idle or now >= next_gone_check:
                    next_gone_check = now + settings.AGENTSITE_STREAM_POLL_IDLE
                    if await _session_state(session_id) is None:
                        return  # deleted
    finally:
        if wakeup is not None:
            wakeup.cancel()
        await layer.group_discard(wakeups.group_name(session_id), channel)


def _retrieve(task: asyncio.Future) -> None:
    """Mark a receive's failure as seen, so asyncio does not log it as unhandled."""
    if not task.cancelled():
        task.exception()


@database_sync_to_async
def _refusal(slug: str, session_id: str, principal) -> APIError | None:
    """Why the caller may not read the session, or None if it may."""
    try:
        get_owned_session(slug, session_id, principal)
    except APIError as exc:
        return exc
    return None


async def _ndjson(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    # An empty first chunk makes daphne send the status and headers now: without
    # it a stream opened on an idle session answers nothing until the next event,
    # and clients waiting for the response headers time out.
    yield b""
    async for event in events:
        yield (json.dumps(event, separators=(",", ":")) + "\n").encode()


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    async for event in events:
        body = json.dumps(event, separators=(",", ":"))
        yield f"id: {event['index']}\nevent: {event['type']}\ndata: {body}\n\n".encode()


@csrf_exempt  # GET only: any other method gets the JSON 405 below, not Django's CSRF page
async def stream_view(request, slug: str, session_id: str):
    if request.method != "GET":
        response = error_response(405, "method_not_allowed", f"{request.method} is not allowed here; use GET")
        response["Allow"] = "GET"
        return response
    principal = authenticate(RequestInfo.from_django(request))
    if principal is None:
        response = error_response(401, "unauthorized", "authentication required: no auth policy admitted this request")
        response["WWW-Authenticate"] = 'Bearer realm="agentsite"'
        return response
    sse = "text/event-stream" in request.headers.get("Accept", "")
    try:
        start = parse_start_index(request.GET.get("startIndex"), request.headers.get("Last-Event-ID") if sse else None)
    except APIError as exc:
        return error_response(exc.status_code, exc.error_code, exc.message)
    if refusal := await _refusal(slug, session_id, principal):
        return error_response(refusal.status_code, refusal.error_code, refusal.message)
    events = follow_events(session_id, start)
    response = StreamingHttpResponse(
        _sse(events) if sse else _ndjson(events),
        content_type="text/event-stream" if sse else "application/x-ndjson",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
