"""Who called the MCP door, as the door admitted them: kept in the request's ASGI scope, where the
SDK's handlers find it (`ctx.request.scope`) whichever task of the SDK runs them."""
from __future__ import annotations

from typing import Any

from channels_app.door_admission import Caller

SCOPE_KEY = "agentsite.mcp_caller"


def caller_of(ctx: Any) -> Caller:
    caller = ctx.request.scope.get(SCOPE_KEY) if ctx.request is not None else None
    if not isinstance(caller, Caller):  # only the door's own ASGI app reaches the SDK
        raise RuntimeError("an MCP request reached the tools without passing the door")
    return caller
