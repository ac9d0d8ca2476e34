"""The MCP door as an ASGI app: admission first, then the official SDK's streamable HTTP transport.

Every request is admitted by `channels_app.door_admission`, as any route is: the Host, the auth
chain (a personal token's `Authorization: Bearer ast_…`, the loopback principal on the embedded
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

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from channels_app.door_admission import admitted
from channels_app.mcp_door.caller import SCOPE_KEY
from channels_app.mcp_door.tools import servers

log = logging.getLogger(__name__)


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
        caller = await admitted(scope, slug, send)
        if caller is None:
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
