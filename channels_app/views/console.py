"""Agents made in the console, over REST (operators): create one from data, save a new release of it,
and read back what a release was saved from (or a folder agent, converted).

`POST /v1/agents` creates (409 `agent_exists` for a slug taken), `PUT /v1/agents/<slug>` saves a new
release (404 for an unknown slug), and `GET /v1/agents/<slug>/definition` gives the active release as
data. Each save validates as a folder deploy does (400 `invalid_agent`, `details` naming each field);
a slug is one kind's at a time (409 `kind_conflict` unless `?replace=true`).
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.console.saving import Saved, as_spec, save
from agents.console.spec import AgentSpec, NewAgentSpec, SpecError, parse
from agents.discovery.bundles import ReleaseUnavailable
from agents.discovery.releases import AgentExists, KindConflict, StaleRelease
from agents.models import Agent
from channels_app.errors import APIError
from channels_app.parsers import parse_count, parse_flag
from channels_app.replies.console import AgentDefinition
from channels_app.schema import refusals
from channels_app.views.agents import AgentListView
from channels_app.views.deployments import RELEASES

REPLACE = OpenApiParameter("replace", bool, description="Replace an agent of the other kind (a folder agent "
                                                        "with this console agent, or the reverse)")
BASE_VERSION = OpenApiParameter("baseVersion", int, description="The release the change was made on: if another "
                                                                "is active now, 409 stale_definition, nothing saved")


def invalid(exc: SpecError) -> APIError:
    return APIError(400, "invalid_agent", f"the agent does not validate: {exc}",
                    [{"field": p.path, "message": p.message} for p in exc.problems])


def saved_as(slug: str, spec: AgentSpec, request: Request, *, new_agent: bool = False,
             on_version: int | None = None) -> Saved:
    replace = parse_flag(request.query_params.get("replace"), "replace") if not new_agent else False
    try:
        return save(slug, spec, saved_by=request.user.principal_id, replace=replace, new_agent=new_agent,
                    on_version=on_version)
    except StaleRelease as exc:
        raise APIError(409, "stale_definition", exc.problems[0].message) from None
    except KindConflict as exc:
        raise APIError(409, "kind_conflict", exc.problems[0].message) from None
    except AgentExists:
        raise exists(slug) from None
    except SpecError as exc:
        raise invalid(exc) from None
    except ReleaseUnavailable as exc:  # a shared tool's owner's release could not be read here
        raise APIError(409, "release_unavailable", str(exc)) from None


def exists(slug: str) -> APIError:
    return APIError(409, "agent_exists", f"agent {slug!r} exists: save a new release of it with PUT /v1/agents/{slug}")


def body_of(request: Request, model: type[AgentSpec]) -> AgentSpec:
    try:
        return parse(request.data, model)
    except SpecError as exc:
        raise invalid(exc) from None


class AgentsView(AgentListView):
    """/v1/agents: its GET lists the agents (for anyone listing admits), its POST creates one (operators)."""

    doors = {"post": RELEASES}

    @extend_schema(operation_id="v1_agents_create", summary="Create an agent from data (operators)",
                   request=NewAgentSpec,
                   responses={201: AgentDefinition, **refusals(400, 401, 403, 409)})
    def post(self, request: Request) -> Response:
        spec: Any = body_of(request, NewAgentSpec)
        if Agent.objects.filter(slug=spec.slug).exclude(active_deployment=None).exists():
            raise exists(spec.slug)
        definition = AgentSpec.model_validate(spec.model_dump(exclude={"slug"}))
        saved = saved_as(spec.slug, definition, request, new_agent=True)
        return Response(AgentDefinition.of(saved.deployed.deployment, definition), status=201)


class AgentDefinitionView(APIView):
    door = RELEASES

    @extend_schema(operation_id="v1_agents_definition_retrieve",
                   summary="The agent's active release as data: a console agent's, or a folder agent's converted",
                   responses={200: AgentDefinition, **refusals(401, 403, 404, 409)})
    def get(self, request: Request, slug: str) -> Response:
        deployment = _active(slug)
        try:
            return Response(AgentDefinition.of(deployment, as_spec(deployment)))
        except ReleaseUnavailable as exc:
            raise APIError(409, "release_unavailable", str(exc)) from None
        except SpecError as exc:
            raise APIError(409, "not_convertible", f"agent {slug!r} is a folder that data cannot hold: {exc}",
                           [{"field": p.path, "message": p.message} for p in exc.problems]) from None



class AgentUpdateView(APIView):
    door = RELEASES

    @extend_schema(operation_id="v1_agents_update", summary="Save a new release of an agent from data (operators)",
                   request=AgentSpec, parameters=[REPLACE, BASE_VERSION],
                   responses={200: AgentDefinition, **refusals(400, 401, 403, 404, 409)})
    def put(self, request: Request, slug: str) -> Response:
        _active(slug)
        base = request.query_params.get("baseVersion")
        on_version = None if base is None else parse_count(base)
        if base is not None and not on_version:
            raise APIError(400, "invalid_query", "baseVersion is the number of the release the change was made on")
        spec = body_of(request, AgentSpec)
        saved = saved_as(slug, spec, request, on_version=on_version)
        return Response(AgentDefinition.of(saved.deployed.deployment, spec))


def _active(slug: str):
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    if agent is None or agent.active_deployment is None:
        raise APIError(404, "agent_not_found", f"no agent {slug!r}: create it with POST /v1/agents")
    return agent.active_deployment

