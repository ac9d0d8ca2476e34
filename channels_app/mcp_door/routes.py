"""Which HTTP requests are the MCP door's: `/mcp` and `/<slug>/mcp` (a trailing slash allowed).

`/<reserved>/mcp` (`/docs/mcp`, the page on MCP servers; `/static/mcp`) stays Django's: no agent can
take a reserved slug. `with_mcp_door` puts the door in front of Django's HTTP app; the door, and the
MCP SDK with it, is imported on a thread by the first request for it (most of a second of CPU), so a
web process that serves none never loads the SDK and the event loop never waits on the import.
"""
from __future__ import annotations

import asyncio
import importlib
import re
from typing import Any

from agents.models import RESERVED_SLUGS

MCP_PATH = re.compile(r"^/(?:(?P<slug>[-a-zA-Z0-9_]+)/)?mcp/?$")
DOOR_MODULE = "channels_app.mcp_door.serving"


def mcp_slug(path: str) -> tuple[bool, str | None]:
    """(whether `path` is the MCP door's, the agent's slug or None for `/mcp`)."""
    match = MCP_PATH.match(path)
    if match is None or match["slug"] in RESERVED_SLUGS:
        return False, None
    return True, match["slug"]


def with_mcp_door(http_app):
    made: list[Any] = []  # the door, once made
    loading: list[asyncio.Future] = []  # the import of its module, started by the first request

    async def door() -> Any:
        if not made:
            if not loading:
                loading.append(asyncio.ensure_future(asyncio.to_thread(importlib.import_module, DOOR_MODULE)))
            module = await asyncio.shield(loading[0])
            if not made:
                made.append(module.McpDoor())
        return made[0]

    async def app(scope, receive, send):
        if scope["type"] == "http":
            ours, slug = mcp_slug(scope["path"])
            if ours:
                return await (await door())(scope, receive, send, slug)
        return await http_app(scope, receive, send)

    return app
