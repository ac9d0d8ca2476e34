"""Which HTTP requests are a protocol door's rather than Django's, and the app that sends them there.

- MCP: `/mcp` and `/<slug>/mcp` (a trailing slash allowed);
- A2A: `/<slug>/.well-known/agent-card.json` (the agent card) and `/<slug>/a2a` (its JSON-RPC endpoint).

A reserved slug's paths (`/docs/mcp`, the page on MCP servers) stay Django's: no agent can take a
reserved slug. Each door, and its protocol's SDK with it, is imported on a thread by the first request
for it (most of a second of CPU), so a web process that serves none never loads the SDK and the event
loop never waits on the import.
"""
from __future__ import annotations

import asyncio
import importlib
import re
from typing import Any, Callable

from agents.models import RESERVED_SLUGS

SLUG = r"[-a-zA-Z0-9_]+"
MCP_PATH = re.compile(rf"^/(?:(?P<slug>{SLUG})/)?mcp/?$")
A2A_PATH = re.compile(rf"^/(?P<slug>{SLUG})/(?:(?P<card>\.well-known/agent-card\.json)|a2a/?)$")
# door → (the module serving it, the class of its app)
DOORS = {"mcp": ("channels_app.mcp_door.serving", "McpDoor"), "a2a": ("channels_app.a2a_door.serving", "A2aDoor")}


def mcp_slug(path: str) -> tuple[bool, str | None]:
    """(whether `path` is the MCP door's, the agent's slug or None for `/mcp`)."""
    match = MCP_PATH.match(path)
    if match is None or match["slug"] in RESERVED_SLUGS:
        return False, None
    return True, match["slug"]


def a2a_target(path: str) -> tuple[str, str] | None:
    """(the agent's slug, "card" or "rpc") when `path` is the A2A door's."""
    match = A2A_PATH.match(path)
    if match is None or match["slug"] in RESERVED_SLUGS:
        return None
    return match["slug"], "card" if match["card"] else "rpc"


def _lazy(door: str) -> Callable[[], Any]:
    made: list[Any] = []  # the door's app, once made
    loading: list[asyncio.Future] = []  # the import of its module, started by the first request

    async def get() -> Any:
        if not made:
            module_name, name = DOORS[door]
            if not loading:
                loading.append(asyncio.ensure_future(asyncio.to_thread(importlib.import_module, module_name)))
            module = await asyncio.shield(loading[0])
            if not made:
                made.append(getattr(module, name)())
        return made[0]

    return get


def with_protocol_doors(http_app):
    mcp, a2a = _lazy("mcp"), _lazy("a2a")

    async def app(scope, receive, send):
        if scope["type"] == "http":
            path = scope["path"]
            ours, slug = mcp_slug(path)
            if ours:
                return await (await mcp())(scope, receive, send, slug)
            target = a2a_target(path)
            if target is not None:
                return await (await a2a())(scope, receive, send, *target)
        return await http_app(scope, receive, send)

    return app
