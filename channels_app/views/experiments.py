"""An agent's A/B experiments and their results, for anyone who may reach the agent (its members)
and operators, as the agent's other routes."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.experiments import ABTest
from channels_app.errors import APIError
from channels_app.replies.experiments import ExperimentList, ExperimentResults, ExperimentSummary
from channels_app.ownership import get_agent
from channels_app.schema import refusals
from sessions.experiments.enrollment import experiments_of

NAME = OpenApiParameter("name", {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,63}$"}, OpenApiParameter.PATH,
                        description="The experiment's name, as `define_ab` gives it")


def declared(agent) -> dict[str, ABTest]:
    return experiments_of(agent.active_deployment) if agent.active_deployment else {}


class ExperimentListView(APIView):
    @extend_schema(operation_id="v1_abs_list", summary="The agent's A/B experiments",
                   responses={200: ExperimentList, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        return Response(ExperimentList(experiments=[ExperimentSummary.of(agent, t) for t in declared(agent).values()]))


class ExperimentResultsView(APIView):
    @extend_schema(operation_id="v1_abs_retrieve", parameters=[NAME],
                   summary="One A/B experiment's results: per variant, means with 95% intervals and the "
                           "difference from control",
                   responses={200: ExperimentResults, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str, name: str) -> Response:
        agent = get_agent(slug)
        test = declared(agent).get(name)
        if test is None:
            raise APIError(404, "experiment_not_found", f"agent {slug!r} declares no experiment {name!r}")
        return Response(ExperimentResults.of(agent, test))
