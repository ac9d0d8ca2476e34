"""An agent's eval cases kept in the admin, over REST (operators): what `manage.py eval --url … --agent SLUG`
reads, and a way to replace them all from a script.

`GET /v1/agents/<slug>/eval-cases` lists them; `PUT` replaces the whole set in one transaction (400
`invalid_request` naming each bad field, nothing changed). Operators only, as the release routes; a
token scoped to some agents is refused, that agent's too.
"""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.evals.stored import CaseList
from agents.models import StoredEvalCase
from channels_app.bodies import validate_body
from channels_app.doors import server_door
from channels_app.replies.evalcases import EvalCases
from channels_app.schema import refusals
from channels_app.views.secrets import operator_agent


EVAL_CASES = server_door("an agent's eval cases")


class EvalCasesView(APIView):
    door = EVAL_CASES

    @extend_schema(operation_id="v1_agents_eval_cases_list", summary="The agent's eval cases kept in the admin",
                   responses={200: EvalCases, **refusals(401, 403, 404, 409)})
    def get(self, request: Request, slug: str) -> Response:
        agent = operator_agent(request, slug)
        return Response(EvalCases.of(agent, agent.eval_cases.all()))

    @extend_schema(operation_id="v1_agents_eval_cases_replace",
                   summary="Replace the agent's eval cases kept in the admin (operators)",
                   request=CaseList, responses={200: EvalCases, **refusals(400, 401, 403, 404, 409)})
    def put(self, request: Request, slug: str) -> Response:
        agent = operator_agent(request, slug)
        body: CaseList = validate_body(CaseList, request.data)
        StoredEvalCase.replace_all(agent, body.cases, by=request.user.principal_id)
        return Response(EvalCases.of(agent, agent.eval_cases.all()))
