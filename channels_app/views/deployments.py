"""An agent's releases, for operators: list, show, activate (`agents.discovery.activation` does the work).

Server-level like `GET /v1/agents`. Operators (staff and the operators group, logged
in or with a personal token) and the loopback caller of the embedded default may use
them, as `GET /metrics`; a member or a token scoped to some agents gets 403, a caller
no policy admits 401 (the door is `RELEASES`, see channels_app.doors). Activating
the release already active is a 409 `already_active`: the caller asked for a change
that did not happen (a retry after a lost answer reads it as done).
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.discovery.activation import ReleaseError, activate_release, find_agent, find_release
from agents.models import Agent, Deployment
from channels_app.doors import server_door
from channels_app.errors import APIError
from channels_app.pagination import ReleasePages, paginate
from channels_app.parsers import parse_count
from channels_app.replies.releases import Release, ReleaseDetail, ReleaseList
from channels_app.schema import list_parameters, refusals

VERSION = OpenApiParameter("version", {"type": "integer", "minimum": 1, "maximum": 999_999_999_999_999_999},
                           OpenApiParameter.PATH, description="The release's number, as the list gives it")
STATUS = {"agent_not_found": 404, "deployment_not_found": 404, "already_active": 409,
          "deployment_unloadable": 409, "no_previous_release": 409}


# Operators only; a token scoped to some agents is refused, that agent's too: it was made to talk
# to those agents, not to change which release serves them.
RELEASES = server_door("an agent's releases")


def refused(exc: ReleaseError) -> APIError:
    return APIError(STATUS.get(exc.code, 400), exc.code, exc.message)


def agent_and_release(slug: str, version: str) -> tuple[Agent, Deployment]:
    try:
        agent = find_agent(slug)
        number = parse_count(version)
        if number is None:
            raise ReleaseError("deployment_not_found", f"agent {slug!r} has no release {version!r}")
        return agent, find_release(agent, number)
    except ReleaseError as exc:
        raise refused(exc) from None


class DeploymentListView(APIView):
    door = RELEASES

    @extend_schema(operation_id="v1_agents_deployments_list", summary="An agent's releases, newest first (operators)",
                   parameters=list_parameters("Releases", 100),
                   responses={200: ReleaseList, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str) -> Response:
        try:
            agent = find_agent(slug)
        except ReleaseError as exc:
            raise refused(exc) from None
        active = agent.active_deployment_id
        return paginate(ReleasePages, agent.deployments.releases(), request, self, lambda d: Release.of(d, active))


class DeploymentDetailView(APIView):
    door = RELEASES

    @extend_schema(operation_id="v1_agents_deployment_retrieve",
                   summary="One release of an agent, with what it declares (operators)", parameters=[VERSION],
                   responses={200: ReleaseDetail, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str, version: str) -> Response:
        agent, deployment = agent_and_release(slug, version)
        return Response(ReleaseDetail.of(deployment, agent.active_deployment_id))


class DeploymentActivateView(APIView):
    door = RELEASES

    @extend_schema(operation_id="v1_agents_deployment_activate",
                   summary="Make a release the one new sessions start on (operators); running sessions keep theirs",
                   parameters=[VERSION], request=None,
                   responses={200: ReleaseDetail, **refusals(400, 401, 403, 404, 409)})
    def post(self, request: Request, slug: str, version: str) -> Response:
        _, deployment = agent_and_release(slug, version)
        try:
            activated = activate_release(deployment)
        except ReleaseError as exc:
            raise refused(exc) from None
        return Response(ReleaseDetail.of(activated, activated.pk))
