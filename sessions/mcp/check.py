"""Starting an agent's MCP servers to see that they work: `validate --check-mcp`, `mcp test SLUG NAME`,
and the servers a deployed agent's pages (the admin, the playground) say cannot be reached."""
from __future__ import annotations

import logging
from pathlib import Path

from agents.discovery import load_deployment
from agents.mcp import McpServer, McpUnavailable, add_unreachable_reader
from agents.models import Agent
from agents.secrets.store import acting_for
from sessions.mcp.declared import refused_by_domains
from sessions.mcp.tools import hub

log = logging.getLogger(__name__)


def check_server(server: McpServer, cwd: Path, domains: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """Start (or reach) `server` as a turn would and list its tools: (their names, "") or ([], why not).
    A server out of the release's allowed `domains` is never reached, as in a turn."""
    if refused := refused_by_domains(server, domains):
        return [], refused
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


def unreachable_servers(agent: Agent) -> dict[str, str]:
    """The servers of the agent's active release that this process cannot start or reach, with why
    (each started, or listed from an earlier start, as a turn would: bounded by its connectTimeout)."""
    if agent.active_deployment is None:
        return {}
    try:
        loaded = load_deployment(agent.active_deployment)
    except Exception:  # a release that no longer loads: its page says so elsewhere
        log.exception("cannot load %s for its MCP servers", agent.active_deployment)
        return {}
    found = {}
    with acting_for(agent.slug):  # their ${VAR}s are the agent's secrets
        for server in loaded.mcp:
            if refused := refused_by_domains(server, loaded.allowed_domains):  # never reached, as in a turn
                found[server.name] = refused
                continue
            try:
                hub().tools(server, loaded.root)
            except McpUnavailable as exc:
                found[server.name] = str(exc)
    return found


def register() -> None:
    add_unreachable_reader(unreachable_servers)
