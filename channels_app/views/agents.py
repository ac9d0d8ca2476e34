"""The agents on this server: list, info, liveness."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from pydantic.alias_generators import to_camel
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.discovery import load_deployment
from agents.mcpauth.stored import with_status
from agents.models import Agent, Deployment
from agents.secrets.store import acting_for
from agents.workspaces import sandbox
from agents.workspaces.sandbox import Limits
from channels_app.auth import agent_scope
from channels_app.doors import LISTING
from channels_app.ownership import get_agent
from channels_app.pagination import AgentPages, paginate
from channels_app.replies.agents import (
    AgentHealth, AgentInfo, AgentList, AgentSummary, ChannelRef, ConnectionState, DeploymentDetail, FolderError,
    Health, ReleaseState,
)
from channels_app.schema import list_parameters, refusals
from sessions.harness.tools import unavailable as unavailable_builtins
from sessions.instants import iso_z
from sessions.mcp.tools import hub
from sessions.models import ChannelConnection, Schedule
from sessions.turn.toolset import declared_tools, offered_tools



class AgentListView(APIView):
    door = LISTING

    @extend_schema(summary="The agents on this server", parameters=list_parameters("Agents", 100),
                   responses={200: AgentList, **refusals(400, 401)})
    def get(self, request: Request) -> Response:
        agents = Agent.objects.select_related("active_deployment").exclude(active_deployment=None)
        scope = agent_scope(request.user)
        if scope is not None:
            # A personal token scoped to some agents lists only those: the others answer it 403.
            agents = agents.filter(slug__in=scope)
        return paginate(AgentPages, agents, request, self, AgentSummary.of)


class AgentInfoView(APIView):
    @extend_schema(summary="The agent: model, tools with their input schemas, deployment",
                   responses={200: AgentInfo, **refusals(400, 401, 404)})
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        with acting_for(agent.slug):  # whether a credential is set, and MCP servers reached, as the agent's
            return Response(self.info(agent))

    @staticmethod
    def info(agent: Agent) -> AgentInfo:
        deployment = agent.active_deployment
        manifest = deployment.manifest if deployment else {}
        schedule_state = {
            s.schedule_id: {"nextFireAt": iso_z(s.next_fire_at), "lastFiredAt": iso_z(s.last_fired_at),
                            "fireCount": s.fire_count}
            for s in Schedule.objects.filter(agent=agent, active=True)
        }
        offered = offered_tools(deployment)  # first: it reaches the MCP servers, whose errors mcp_now shows
        return AgentInfo(
            slug=agent.slug, name=agent.name or agent.slug, description=agent.description,
            model=manifest.get("model", ""), models=deployment.models if deployment else [],
            fallback=manifest.get("fallback", []), peers=manifest.get("peers", []),
            builtins=manifest.get("builtins", []), unavailable_builtins=unavailable_builtins(manifest.get("builtins", [])),
            params=manifest.get("params", {}), max_steps=manifest.get("maxSteps"),
            tools=declared_tools(manifest), skills=manifest.get("skills", []),
            subagents=manifest.get("subagents", []), channels=[ChannelRef(id="http", kind="http")] + [
                ChannelRef(id=c["id"], kind=c["kind"], description=c.get("description", ""),
                           routes=c.get("routes", []), events=c.get("events", []), auth=c.get("auth"),
                           shared_sessions=c.get("sharedSessions", False),
                           config=channel_config(deployment, c["id"]) if "config" in c else None,
                           connection=connection_state(agent, c["id"]) if c.get("hasConnection") else None)
                for c in manifest.get("channels", [])
            ],
            schedules=[{**s, **schedule_state.get(s["id"], {})} for s in manifest.get("schedules", [])],
            runtime=runtime_now(manifest.get("runtime")), offered_tools=offered,
            mcp=mcp_now(agent, deployment, manifest.get("mcp", [])),
            deployment=DeploymentDetail.of(deployment) if deployment else None,
            folder_error=FolderError.of(agent),
        )


def runtime_now(runtime: dict[str, Any] | None) -> dict[str, Any] | None:
    """The release's runtime as this host runs it: whether the sandbox is active, and `shell` only where
    it may be offered (the manifest was written where the release was deployed)."""
    if not runtime or runtime.get("kind") != "local":
        return runtime
    state = sandbox.status()
    tools = runtime.get("workspaceTools")
    if tools is not None and not state.offers_shell:
        tools = [t for t in tools if t != "shell"]
    limits = runtime.get("limits") or Limits().describe()
    return {**runtime, "workspaceTools": tools,
            "sandbox": state.describe(network=bool(runtime.get("network")), limits=limits)}


def mcp_now(agent: Agent, deployment: Deployment | None, described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The declared MCP servers, each one this process could not reach with the reason as its `error`."""
    servers = with_status(agent, described)
    if deployment is None:
        return servers
    try:
        root = load_deployment(deployment).root
    except Exception:  # offered_tools logged it
        return servers
    return [{**m, "error": error} if (error := hub().error(m["name"], root)) else m for m in servers]


def channel_config(deployment: Deployment, channel_id: str) -> dict[str, Any] | None:
    """A provider channel's described config, read now: whether a secret is set changes without a deploy."""
    found = load_deployment(deployment).channels.get(channel_id)
    if found is None or found.channel.config is None:
        return None
    return {to_camel(name): value for name, value in found.channel.config.describe().items()}


def connection_state(agent: Agent, channel_id: str) -> ConnectionState:
    """Up: the holder said its transport is open, and renews its lease. A renewal may come late
    (a busy SQLite file): only a lease lapsed for as long again means the holder is gone."""
    grace = timedelta(seconds=settings.AGENTSITE_CHANNEL_LEASE_SECONDS)
    row = ChannelConnection.objects.filter(agent=agent, channel=channel_id,
                                           held_until__gte=timezone.now() - grace).first()
    up = row is not None and row.connected_at is not None
    return ConnectionState(connected=up, connected_at=row.connected_at if up else None)


class AgentReleaseView(APIView):
    @extend_schema(summary="The release new sessions start on, and whether the watched folder validates",
                   responses={200: ReleaseState, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        return Response(ReleaseState.of(agent, settings.AGENTSITE_RELOAD))


class AgentHealthView(APIView):
    # The agent's door, as its other routes: whether an agent exists is not for callers who may
    # not reach it (a load balancer asks /healthz, which names no agent).

    @extend_schema(summary="Liveness of one agent", responses={200: AgentHealth, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        return Response(AgentHealth(status="ok", agent=agent.slug, deployed=agent.active_deployment_id is not None))


class HealthView(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(summary="Liveness of the server", responses={200: Health, **refusals(400)})
    def get(self, request: Request) -> Response:
        return Response(Health(status="ok"))
