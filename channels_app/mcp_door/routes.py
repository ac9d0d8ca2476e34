"""Which HTTP requests are the MCP door's: `/mcp` and `/<slug>/mcp` (a trailing slash allowed).

`with_mcp_door` puts the door in front of Django's HTTP app. It imports the door, and with it the
MCP SDK, on the first request for it: a web process that serves none never loads the SDK.
"""
from __future__ import annotations

import re
from typing import Any

MCP_PATH = re.compile(r"^/(?:(?P<slug>[-a-zA-Z0-9_]+)/)?mcp/?$")


def mcp_slug(path: str) -> tuple[bool, str | None]:
    """(whether `path` is the MCP door's, the agent's slug or None for `/mcp`)."""
    match = MCP_PATH.match(path)
    if match is None:
        return False, None
    return True, match["slug"]


def with_mcp_door(http_app):
    door: list[Any] = []  # made by the first request: nothing awaits in between, so once per process

    async def app(scope, receive, send):
        if scope["type"] == "http":
            ours, slug = mcp_slug(scope["path"])
            if ours:
                if not door:
                    from channels_app.mcp_door.serving import McpDoor

                    door.append(McpDoor())
                return await door[0](scope, receive, send, slug)
        return await http_app(scope, receive, send)

    return app
