"""Bodies of the agent routes: the list, `/info` (the agent and its channels described), liveness."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.conf import settings

from agents.models import Agent, Deployment
from channels_app.described import (
    AuthPolicyDescription, JSONObject, JSONValue, McpServerDescription, RuntimeDescription, ScheduleDescription,
    SkillDescription, SubagentDescription, ToolDescription,
)
from channels_app.replies.base import Page, Reply


class DeploymentRef(Reply):
    version: int
    content_hash: str

    @classmethod
    def of(cls, deployment: Deployment) -> DeploymentRef:
        return cls(
            version=deployment.version,
            content_hash=deployment.content_hash,
        )


class AgentSummary(Reply):
    slug: str
    name: str
    description: str
    model: str
    deployment: DeploymentRef

    @classmethod
    def of(cls, agent: Agent) -> AgentSummary:
        return cls(
            slug=agent.slug,
            name=agent.name or agent.slug,
            description=agent.description,
            model=agent.model_id,
            deployment=DeploymentRef.of(agent.active_deployment),
        )


class AgentList(Page):
    """One page of the agents, by slug; `nextCursor` only when another page follows."""

    agents: list[AgentSummary]
    next_cursor: str | None = None


class DeploymentDetail(DeploymentRef):
    source: str
    source_kind: str  # what it was made from: a folder, a repo, or the console (data)
    status: str
    created_at: datetime | None
    activated_at: datetime | None

    @classmethod
    def of(cls, deployment: Deployment) -> DeploymentDetail:
        return cls(
            version=deployment.version,
            content_hash=deployment.content_hash,
            source=deployment.source,
            source_kind=deployment.source_kind,
            status=deployment.status,
            created_at=deployment.created_at,
            activated_at=deployment.activated_at,
        )


class FolderProblem(Reply):
    path: str  # the file (or folder) at fault, as the validation names it
    message: str  # what is wrong and the fix


class FolderError(Reply):
    """The folder a reloading server watches fails to validate: the active release still serves."""

    since: datetime  # the first failing save of this run of them
    problems: list[FolderProblem]

    @classmethod
    def of(cls, agent: Agent) -> FolderError | None:
        """Only while the server watches its folders: without them nobody would clear it on a fix."""
        if agent.folder_problems_since is None or not settings.AGENTSITE_RELOAD:
            return None
        return cls(since=agent.folder_problems_since,
                   problems=[FolderProblem(**problem) for problem in agent.folder_problems])


class ReleaseState(Reply):
    """Which release new sessions start on now, and whether the watched folder validates (the
    playground asks every second under `serve --dev` or `--reload`, to say "v4 deployed")."""

    slug: str
    version: int | None
    content_hash: str
    activated_at: datetime | None
    reloading: bool  # the server runs with reload on (serve --dev / --reload): the folders it serves are watched
    folder_error: FolderError | None = None

    @classmethod
    def of(cls, agent: Agent, reloading: bool) -> ReleaseState:
        d = agent.active_deployment
        return cls(slug=agent.slug, version=d.version if d else None, content_hash=d.content_hash if d else "",
                   activated_at=d.activated_at if d else None, reloading=reloading, folder_error=FolderError.of(agent))


class AgentHealth(Reply):
    status: Literal["ok"]
    agent: str
    deployed: bool


class Health(Reply):
    status: Literal["ok"]


# -- GET /<slug>/v1/info: the agent as its active release describes it (built in channels_app.views.agents,
# which reads what changes without a deploy: the sandbox, the MCP servers, a channel's secrets)

class ChannelRoute(Reply):
    method: str
    # As declared, below the channel (`/items/:id`), and the full path on this server.
    path: str
    url: str
    description: str = ""
    # JSON Schemas of the route's pydantic models: free-form.
    body_schema: JSONObject | None = None
    query_schema: JSONObject | None = None
    # The handler reads the bytes itself (a provider's signed body or form): no schema.
    raw_body: bool = False


class ConnectionState(Reply):
    """A channel's connection to its provider (Slack's Socket Mode), held by one process."""

    connected: bool
    connected_at: datetime | None = None


class ChannelRef(Reply):
    """A channel the agent is reached through: `http` (built in) or a custom one
    with its routes and their schemas. Auth policies are named by kind, never with a token."""

    id: str
    kind: str
    description: str = ""
    routes: list[ChannelRoute] = []
    events: list[str] = []
    auth: list[AuthPolicyDescription] | None = None
    # True: every caller the channel admits reaches every session of it (a shared identity, such
    # as a signed webhook); False: a key or session id reaches only the caller's own sessions.
    shared_sessions: bool = False
    # A provider channel's settings, by the kind's own names: the variables holding its secrets and
    # whether each is set ({env, set}), never a value; other settings as they are.
    config: dict[str, JSONValue] | None = None
    # A channel that keeps a connection open to its provider: whether it is up now (else null).
    connection: ConnectionState | None = None


class AgentInfo(Reply):
    slug: str
    name: str
    description: str
    model: str  # the default: what a session that names no model is bound to
    models: list[str] = []  # what POST /session may name as `model`, as resolved at deploy; the first is `model`
    fallback: list[str] = []  # what a failed model call may fall over to, in order (none: the turn fails)
    peers: list[str] = []  # the agents (slugs) it may message
    builtins: list[str] = []  # the built-in tools it opted into (`Agent(builtins=[...])`), in `offeredTools`
    # Those of them this server cannot offer now, each with why (e.g. web_search without a search backend).
    unavailable_builtins: dict[str, str] = {}
    # The model's parameters, passed to its provider as they are: free-form.
    params: JSONObject
    max_steps: int | None
    tools: list[ToolDescription]
    skills: list[SkillDescription]
    subagents: list[SubagentDescription]
    channels: list[ChannelRef]
    schedules: list[ScheduleDescription]
    deployment: DeploymentDetail | None
    runtime: RuntimeDescription | None = None
    # Every tool the model is offered: name, family (server | workspace | builtin | mcp), source (a file,
    # an MCP server or a built-in feature), input schema.
    offered_tools: list[ToolDescription] = []
    mcp: list[McpServerDescription] = []
    # Under serve --dev / --reload: why the agent's folder does not validate now (null when it does).
    folder_error: FolderError | None = None
