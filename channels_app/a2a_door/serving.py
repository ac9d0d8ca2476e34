"""The A2A door as an ASGI app: admission first, then the agent's card or the SDK's JSON-RPC dispatcher.

Every request is admitted by `channels_app.door_admission`, as any route is (the auth chain, the agent
in the path against a token's scope, a foreign `Origin` on a write); a refusal is the JSON error of
every route (401 with `WWW-Authenticate`, 403, 404, 429). The dispatcher speaks A2A 1.0
(`SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`, `ListTasks`) and
0.3 (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe`) on the same
endpoint. Nothing of a conversation lives in a web process: any process answers any request.
"""
from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from channels.db import database_sync_to_async
from django.conf import settings
from starlette.requests import Request
from starlette.responses import JSONResponse

from channels_app.a2a_door.card import card
from channels_app.a2a_door.handler import CALLER, SessionTasks
from channels_app.door_admission import Caller, admitted, send_refusal
from channels_app.errors import APIError


class CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, carrying the caller the door admitted."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = request.scope[CALLER]
        return context


def _card(caller: Caller) -> dict:
    return agent_card_to_dict(card(caller.slug, caller.origin))


async def read_body(receive, limit: int) -> bytes | None:
    """The request's body, or None once it is over `limit` bytes (read no further)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return bytes(body)


def replay(body: bytes, receive):
    """An ASGI `receive` that gives `body` once, then the connection's own (which tells a stream when the
    client leaves)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class A2aDoor:
    def __init__(self) -> None:
        self.dispatcher = JsonRpcDispatcher(SessionTasks(), context_builder=CallerContext(), enable_v0_3_compat=True)

    async def __call__(self, scope, receive, send, slug: str, target: str) -> None:
        allowed = "GET" if target == "card" else "POST"
        if scope["method"] != allowed and not (target == "card" and scope["method"] == "HEAD"):
            refusal = APIError(405, "method_not_allowed", f"{scope['method']} is not allowed here; use {allowed}",
                               headers={"Allow": allowed})
            await send_refusal(refusal, send)
            return
        caller = await admitted(scope, slug, send)
        if caller is None:
            return
        if target == "card":
            try:
                body = await database_sync_to_async(_card)(caller)
            except APIError as exc:  # the agent went between admission and now
                await send_refusal(exc, send)
                return
            response = JSONResponse(body, headers={"Cache-Control": "no-cache"})
        else:
            body = await read_body(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
            if body is None:  # as every route: the upload limit, AGENTSITE_MAX_BODY_BYTES
                await send_refusal(APIError(413, "body_too_large", "the request body is too large"), send)
                return
            response = await self.dispatcher.handle_requests(Request({**scope, CALLER: caller}, replay(body, receive)))
        await response(scope, receive, send)
