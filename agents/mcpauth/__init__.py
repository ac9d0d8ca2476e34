"""OAuth for MCP servers declared with `"oauth": true`: the secrets' names, the stored tokens, refresh.

`bearer_token(server)` is what a connection sends; `manage.py mcp oauth SLUG NAME`
(and the playground's button) obtains the first tokens.
"""
from __future__ import annotations

import re

from agents.mcp import McpServer
from agents.secrets.lookup import credential


class NotAuthorized(Exception):
    """The server wants OAuth and the agent holds no usable tokens for it: a person must authorize it."""


def secret_prefix(server_name: str) -> str:
    """`MCP_OAUTH_<NAME>`: the name upper-cased, anything but letters and digits as `_`."""
    return "MCP_OAUTH_" + re.sub(r"[^A-Z0-9]", "_", server_name.upper())


def bearer_token(server: McpServer) -> str:
    """The access token to send to `server` (read from the agent's secrets)."""
    token = credential(f"{secret_prefix(server.name)}_ACCESS_TOKEN")
    if token is None:
        raise NotAuthorized(f"MCP server {server.name!r} is not authorized: run manage.py mcp oauth SLUG {server.name}")
    return token
