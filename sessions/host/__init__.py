"""`ctx.host`: the services agent code reaches on tool, schedule and reminder contexts.

    ctx.host.kv          durable key-value store of the agent (or of one session)   sessions.host.kv
    ctx.host.files       durable file store of the agent                             sessions.host.files
    ctx.host.artifacts   files a turn produces, downloadable by the session's owner  sessions.host.artifacts
    ctx.host.reminders   reminders bound to a session                                sessions.host.reminders
    ctx.host.http        outbound HTTP through the SSRF guard                        agents.integrations.outbound
    ctx.host.otel        span attributes and metrics over OpenTelemetry              sessions.host.otel
    ctx.host.mcp         the agent's MCP servers, advertised or not                  sessions.host.mcp
    ctx.host.github, .gitlab, .bitbucket, .slack   API clients                       sessions.host.providers

Everything is stored in the database, never in process memory, so a value
written by a turn in one worker is there for the next turn in another.
A host is bound to an agent and, on tool and reminder contexts, to a session
(and, in a turn, to the turn and tool call that produce artifacts).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.integrations.outbound import OutboundClient
from sessions.host.artifacts import ArtifactInfo, Artifacts, save_artifact
from sessions.host.checks import FileChanged, HostError
from sessions.host.files import FileInfo, Files
from sessions.host.kv import KV
from sessions.host.mcp import Mcp
from sessions.host.otel import Otel
from sessions.host.providers import provider_client, release_domains
from sessions.host.reminders import Reminders
from sessions.models import Session

__all__ = [
    "ArtifactInfo", "Artifacts", "FileChanged", "FileInfo", "Files", "Host", "HostError", "KV", "Mcp", "Otel",
    "Reminders", "bind_filesystem", "save_artifact",
]


@dataclass
class Host:
    """Shared services on tool, channel, schedule and reminder contexts."""

    session: Session | None
    agent: Any = None
    turn_id: str = ""
    call_id: str = ""
    # Outside a turn, the agents' root and hops the code acts under (a reminder's handler, a channel's
    # handler of an agents' turn): reminders it sets carry them (sessions.messaging.limits).
    origin: dict | None = None

    @property
    def agent_id(self) -> int | None:
        return getattr(self.agent, "pk", None) or (self.session.agent_id if self.session else None)

    @property
    def reminders(self) -> Reminders:
        return Reminders(self.session, self.agent, self.turn_id, self.origin)

    @property
    def kv(self) -> KV:
        return KV(self.agent_id, self.session)

    @property
    def files(self) -> Files:
        return Files(self.agent_id)

    @property
    def otel(self) -> Otel:
        return Otel()

    @property
    def mcp(self) -> Mcp:
        """Call the agent's MCP servers from its tools (`ctx.host.mcp.call(server, tool, args)`), those
        declared `advertise=False` included; dry-run and approval rules in sessions.host.mcp."""
        return Mcp(self.agent if self.agent is not None else getattr(self.session, "agent", None), self.session,
                   self.turn_id, self.call_id)

    @property
    def artifacts(self) -> Artifacts:
        return Artifacts(self.session, self.agent_id, self.turn_id, self.call_id)

    @property
    def http(self) -> OutboundClient:
        """An HTTP client that refuses loopback, private, link-local and metadata addresses
        (and redirects to them); `AGENTSITE_OUTBOUND_ALLOW` admits named networks. Its methods
        take httpx's request arguments, `timeout` bounding the whole call. Close it after use
        (`with ctx.host.http as http: ...`). A release deployed with allowed domains reaches those alone."""
        return OutboundClient(domains=release_domains(self.agent, self.session))

    # Code hosts and Slack, with the credentials of the agent's channel of that kind.
    @property
    def github(self) -> Any:
        return provider_client(self.agent, self.session, "github")

    @property
    def gitlab(self) -> Any:
        return provider_client(self.agent, self.session, "gitlab")

    @property
    def bitbucket(self) -> Any:
        return provider_client(self.agent, self.session, "bitbucket")

    @property
    def slack(self) -> Any:
        """Slack's Web API as the agent's bot (SLACK_BOT_TOKEN unless its slack_channel names another)."""
        return provider_client(self.agent, self.session, "slack")


def bind_filesystem(fs: Any, host: Host) -> Any:
    """A session's filesystem with its host-bound declarations resolved.

    A filesystem object that needs the session's host (`host_files_fs()`)
    has `bind_host(host)`, which returns the filesystem to use; any other
    object is used as it is. Call this where a session's workspace is built.
    """
    bind = getattr(fs, "bind_host", None)
    return bind(host) if callable(bind) else fs
