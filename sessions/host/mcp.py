"""`ctx.host.mcp`: the agent's MCP servers, called from its own tools.

    result = ctx.host.mcp.call("crm", "find_customer", {"email": input.email})
    names = ctx.host.mcp.tools("crm")

Every server the agent declares is reachable this way; one declared
`"advertise": false` (`mcp_stdio(..., advertise=False)`) is reachable only
this way, since the model is never offered its tools. A call goes through
the process's connection to the server (sessions.mcp.tools), with the agent's
credentials (its secrets, then the environment, in any context: a reminder's
or a schedule's too) and the release's allowed domains, like the model's calls.

The rules the model's calls follow apply, as far as a call made from inside
a running tool can follow them:

1. Dry run. In a dryRun session a tool the server does not mark read-only
   (its `readOnlyHint` annotation) is not called: `call` returns
   `{"stubbed": True, "output": DRY_RUN_NOTE}` instead. Read-only tools run.
2. Approval. A tool the declaration gates (`needsApproval`) cannot wait for
   a decision here: the calling tool is already running, and its code cannot
   park mid-call. So it runs only within a call that was itself approved
   (the calling tool declared `needs_approval=True` and someone approved this
   call, or an operator approved it up front with `manage.py call --session ID --approve`);
   anywhere else `call` raises McpApprovalRequired, and the fix is to gate
   the calling tool. A stub has no effect and needs no approval (rule 1 first).

What `call` raises, all McpError (exported by agents.sdk): McpNotFound (no
such server, naming the declared ones; no such tool, naming the server's),
McpApprovalRequired, McpUnavailable (the server cannot be reached, did not
answer in time, went away, or is outside the allowed domains) and
McpToolError (the server ran the tool and reported an error).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.discovery import LoadedAgent, load_deployment
from agents.mcp import McpApprovalRequired, McpNotFound, McpServer, McpUnavailable
from agents.secrets.store import acting_for
from sessions.host.providers import bound_release
from sessions.mcp.declared import refused_by_domains
from sessions.mcp.tools import hub
from sessions.models import Session, ToolCall

DRY_RUN_NOTE = "Operation acknowledged (dry run: the MCP tool was not called)."


@dataclass
class Mcp:
    """The MCP servers of the agent a context runs for (its session's release, else the active one)."""

    agent: Any
    session: Session | None
    turn_id: str = ""
    call_id: str = ""

    def call(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """Run `tool` of `server` with `arguments`; its result as JSON data (see the module's rules)."""
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError(f"arguments of MCP tool {tool!r}: a dict of the tool's input, "
                            f"not {type(arguments).__name__}")
        loaded, declared = self._server(server)
        with acting_for(loaded.slug):
            return self._call(loaded, declared, tool, dict(arguments or {}))

    def _call(self, loaded: LoadedAgent, declared: McpServer, tool: str, arguments: dict[str, Any]) -> Any:
        server = declared.name
        listed = {remote.name: remote for remote in hub().tools(declared, loaded.root)}
        remote = listed.get(tool)
        if remote is None:
            raise McpNotFound(f"MCP server {server!r} has no tool {tool!r}; its tools: "
                              f"{', '.join(sorted(listed)) or 'none'}")
        annotations = getattr(remote, "annotations", None)
        if self._dry_run() and not (annotations and annotations.read_only_hint):
            return {"stubbed": True, "output": DRY_RUN_NOTE}
        if declared.tool_needs_approval(tool) and not self._approved():
            raise McpApprovalRequired(
                f"MCP tool {tool!r} of server {server!r} needs approval, and a tool cannot wait for a decision "
                "in the middle of its call: declare the calling tool with needs_approval=True, so that its own "
                "call is approved first")
        return hub().call(declared, loaded.root, tool, arguments)

    def tools(self, server: str) -> list[str]:
        """The names of `server`'s tools, as it last listed them."""
        loaded, declared = self._server(server)
        with acting_for(loaded.slug):
            return sorted(remote.name for remote in hub().tools(declared, loaded.root))

    def _server(self, name: str) -> tuple[LoadedAgent, McpServer]:
        deployment = bound_release(self.agent, self.session)
        if deployment is None:
            raise McpNotFound("the agent has no active release, so no MCP server")
        loaded = load_deployment(deployment)
        declared = next((s for s in loaded.mcp if s.name == name), None)
        if declared is None:
            raise McpNotFound(f"the agent declares no MCP server {name!r}; its servers: "
                              f"{', '.join(sorted(s.name for s in loaded.mcp)) or 'none'}")
        if refused := refused_by_domains(declared, loaded.allowed_domains):
            raise McpUnavailable(refused)
        return loaded, declared

    def _dry_run(self) -> bool:
        return self.session is not None and self.session.run_options.dry_run

    def _approved(self) -> bool:
        """Whether the call running this code was approved: a decision is on its row, and it runs."""
        if self.session is None or not self.call_id:
            return False
        return ToolCall.objects.filter(session=self.session, turn_id=self.turn_id, call_id=self.call_id,
                                       status=ToolCall.Status.RUNNING, decided_by__isnull=False).exists()
