"""Starting an agent's MCP servers to see that they work: `validate --check-mcp` and `mcp test SLUG NAME`."""
from __future__ import annotations

from pathlib import Path

from agents.mcp import McpServer, McpUnavailable
from sessions.mcp.tools import hub


def check_server(server: McpServer, cwd: Path) -> tuple[list[str], str]:
    """Start (or reach) `server` as a turn would and list its tools: (their names, "") or ([], why not)."""
    try:
        connection = hub().connect(server, cwd)
    except McpUnavailable as exc:
        return [], str(exc)
    return sorted(tool.name for tool in connection.tools), ""


def report(server: McpServer, tools: list[str], error: str) -> str:
    """One line for a person: the tools, or the error."""
    if error:
        return f"MCP server {server.name!r}: FAILED: {error.removeprefix(f'MCP server {server.name!r} ')}"
    return f"MCP server {server.name!r}: {len(tools)} tool(s): {', '.join(tools) or 'none'}"


def stop_all() -> None:
    """Close every connection this process opened (a command's servers end with it)."""
    hub().close_all()
