"""OAuth for MCP servers declared with `"oauth": true`: the stored authorization, refresh, the flows.

`bearer_token(server)` is what a connection sends (`tokens`); `manage.py mcp
oauth SLUG NAME` (`loopback`) and the playground's button (`flows.begin`,
then `flows.exchange_code` in its callback) obtain the first tokens, which
`stored` keeps as the agent's `MCP_OAUTH_<NAME>_*` secrets.
"""
from __future__ import annotations

from agents.mcpauth.stored import NotAuthorized, command, secret_prefix, status
from agents.mcpauth.tokens import bearer_token, rejected

__all__ = ["NotAuthorized", "bearer_token", "command", "rejected", "secret_prefix", "status"]
