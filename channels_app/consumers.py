"""The session event websocket: `/<slug>/v1/session/<id>/ws?startIndex=N`.

It sends the same envelopes as the NDJSON stream, one per text frame, by
running the same follower (replay from startIndex, then live). The auth
chain and ownership are the HTTP routes'. A refused socket is accepted and
closed at once with a code the page can read: 4401 (no policy admitted
it), 4403 (foreign Origin or another principal's session, unless the caller is
an operator, who may follow and stop it but not post to it), 4404 (unknown
session), 4400 (bad startIndex, or a session id holding NUL), 4429 (too many wrong
tokens from the client: an error frame with `retryAfter` comes first). A client may
send `{"type": "message", "message": "...", "admission": "coalesce"}` (and, as over
HTTP, optionally the session's own `"model"`: another is a `handoff_required` error) to
post a follow-up through the socket; a bad frame gets an error frame, and
the socket stays open.
"""
from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from channels_app.auth import RequestInfo
from channels_app.bodies import SocketMessage, validate_body
from channels_app.doors import admit, refuse_socket
from channels_app.errors import APIError
from channels_app.middleware import bad_path_id
from channels_app.origin import foreign_websocket_origin
from channels_app.ownership import get_owned_session
from channels_app.parsers import JSONRefused, load_json, parse_start_index
from channels_app.ratelimits import MESSAGES, check_rate
from sessions.turn.admission import AdmissionError, stop_session, submit_message
from sessions.eventlog.follow import follow_events
from sessions.metrics.families import stream_closed, stream_opened

log = logging.getLogger(__name__)


_owned_session = database_sync_to_async(get_owned_session)
_admit = database_sync_to_async(admit)


class SessionEventsConsumer(AsyncWebsocketConsumer):
    follower: asyncio.Task | None = None

    async def connect(self) -> None:
        await self.accept()
        # A page on another site must not follow or drive a session through the visitor's browser.
        if foreign_websocket_origin(self.scope) is not None:
            return await self.close(code=4403)
        kwargs = self.scope["url_route"]["kwargs"]
        try:  # a personal token is a row to read
            self.principal = await _admit(RequestInfo.from_scope(self.scope), slug=kwargs.get("slug"))
        except APIError as exc:
            return await refuse_socket(self, exc)
        if bad_path_id(kwargs):
            return await self.close(code=4400)
        query = parse_qs(self.scope.get("query_string", b"").decode("utf-8", "replace"))
        try:
            self.session = await _owned_session(kwargs["slug"], kwargs["session_id"], self.principal, operators=True)
            start = parse_start_index(query.get("startIndex", [None])[0])
        except APIError as exc:
            return await refuse_socket(self, exc)
        self.follower = asyncio.create_task(self.follow(start))
        stream_opened("websocket")

    async def follow(self, start: int) -> None:
        try:
            async for batch in follow_events(self.session.id, start, self.session.mode):
                for line in batch:
                    await self.send(text_data=line.json)
            await self.close(code=1000)  # a task session ended, or the session was deleted
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            # The client hung up while frames were still going out (uvicorn's ClientDisconnected is an
            # OSError): its own doing, one line, and nothing left to close.
            log.info("websocket follower of %s stopped: the client hung up (%s)", self.session.id,
                     type(exc).__name__)
        except Exception:
            log.exception("websocket follower of %s failed", self.session.id)
            await self.close(code=1011)

    async def disconnect(self, code: int) -> None:
        if self.follower is not None:  # counted open since its follower started
            self.follower.cancel()
            stream_closed("websocket")

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.follower is None:
            return
        try:
            frame = load_json(text_data or "", "frame")
            if not isinstance(frame, dict):
                raise ValueError("a frame is a JSON object")
        except JSONRefused as exc:
            return await self.send_error(exc.code, exc.message)
        except ValueError:
            return await self.send_error("invalid_frame", "send a JSON object such as {\"type\": \"message\", \"message\": \"...\"}")
        kind = frame.get("type")
        try:
            if kind == "message":
                if not self.session.is_owned_by(self.principal):  # an operator following someone else's
                    raise APIError(403, "forbidden", "only the session's own principal may send it messages")
                body: SocketMessage = validate_body(SocketMessage, frame)
                await database_sync_to_async(check_rate)(self.principal, MESSAGES)
                admitted = await database_sync_to_async(submit_message)(self.session, body.message,
                                                                         admission=body.admission,
                                                                         model=body.model or "")
                await self.send(text_data=json.dumps({"type": "ack", "turnId": admitted.turn.id}))
            elif kind == "stop":
                stopping = await database_sync_to_async(stop_session)(self.session, by=self.principal)
                await self.send(text_data=json.dumps({"type": "ack", "stopping": stopping}))
            else:
                await self.send_error("invalid_frame", "type must be 'message' or 'stop'")
        except AdmissionError as exc:
            await self.send_error(exc.code, exc.message)
        except APIError as exc:
            await self.send_error(exc.error_code, exc.message)

    async def send_error(self, code: str, message: str, details: dict | None = None) -> None:
        error = {"code": code, "message": message, **({"details": details} if details else {})}
        await self.send(text_data=json.dumps({"type": "error", "error": error}))
