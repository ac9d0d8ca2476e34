"""The MCP door as an ASGI app: admission first, then the official SDK's streamable HTTP transport.

Every request is admitted by `channels_app.doors.admit`, as any route is: the Host, the auth chain
(a personal token's `Authorization: Bearer ast_…`, the loopback principal on the embedded
default), the agent in the path against a token's scope, and for a write a foreign `Origin`
refused. A refusal is the JSON error of every route (401 with `WWW-Authenticate`, 403, 404, 429).

The transport is stateless: no session lives in a web process, so any web process answers any
request of a client, and the conversation's state is the agentsite session the tool results name.
The SDK's session manager needs a task group running on the event loop; it starts with the first
MCP request a process serves, so a web process that never serves one never imports the SDK.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from channels_app.auth import RequestInfo
from channels_app.doors import AGENT, LISTING, admit
from channels_app.errors import APIError
from channels_app.mcp_door.caller import SCOPE_KEY, Caller
from channels_app.mcp_door.tools import servers
from channels_app.origin import foreign_origin_message, foreign_source
from channels_app.ownership import get_agent
from sessions.plumbing.redisdown import redis_unreachable

log = logging.getLogger(__name__)


def admit_caller(scope: dict[str, Any], slug: str | None) -> Caller:
    """The caller `/<slug>/mcp` (slug) or `/mcp` (None) admits, else the APIError saying why not."""
    info = RequestInfo.from_scope(scope)
    principal = admit(info, AGENT if slug else LISTING, slug)
    scheme = scope.get("scheme", "http")
    if scope.get("method") not in ("GET", "HEAD", "OPTIONS"):
        source = foreign_source(scheme, info.host, info.headers)
        if source is not None:
            raise APIError(403, "foreign_origin", foreign_origin_message(source), {"origin": source})
    if slug is not None:
        get_agent(slug)  # 404 agent_not_found before any MCP exchange
    origin = settings.AGENTSITE_PUBLIC_URL.rstrip("/") or f"{scheme}://{info.host}"
    return Caller(principal, slug, origin)


async def send_refusal(exc: APIError, send) -> None:
    response = exc.response()
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


class McpDoor:
    """Both doors of one web process: `/<slug>/mcp` and `/mcp`, each with its SDK session manager.

    The managers' task group runs in a task of its own, started by the first request; should it end,
    the next request starts new managers (a manager runs once).
    """

    def __init__(self) -> None:
        self.servers = servers()
        self.one: StreamableHTTPSessionManager | None = None
        self.every: StreamableHTTPSessionManager | None = None
        self._started: asyncio.Future[None] | None = None
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, scope, receive, send, slug: str | None) -> None:
        try:
            caller = await database_sync_to_async(admit_caller)(scope, slug)
        except APIError as exc:
            await send_refusal(exc, send)
            return
        except redis_unreachable() as exc:  # the lockout counters' cache restarting
            log.warning("Redis is unreachable: %s", exc)
            await send_refusal(APIError(503, "service_unavailable", "Redis is unreachable; try again shortly",
                                        headers={"Retry-After": "2"}), send)
            return
        await self._running()
        manager = self.every if slug is None else self.one
        await manager.handle_request({**scope, SCOPE_KEY: caller}, receive, send)

    async def _running(self) -> None:
        if self._runner is None or self._runner.done():
            self._started = asyncio.get_running_loop().create_future()
            self._runner = asyncio.create_task(self._run(self._started), name="mcp-door")
        await asyncio.shield(self._started)

    async def _run(self, started: asyncio.Future[None]) -> None:
        one, every = self.servers
        self.one = StreamableHTTPSessionManager(one, stateless=True)
        self.every = StreamableHTTPSessionManager(every, stateless=True)
        try:
            async with self.one.run(), self.every.run():
                started.set_result(None)
                await asyncio.Event().wait()  # for the life of the process
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc if isinstance(exc, Exception) else RuntimeError("the MCP door stopped"))
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("the MCP door's session managers stopped")
            raise
