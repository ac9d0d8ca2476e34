"""An agent's secrets, for operators: list their names, show one's metadata, set, unset.

Server-level like the release routes, and for the same callers: operators
(staff and the operators group, logged in or with a personal token) and the
loopback caller of the embedded default; a member gets 403, a caller no policy
admits 401. A personal token scoped to some agents gets 403 too: it was made
to reach those agents' sessions, not to manage their credentials. A value goes
in (PUT) and never comes out: every answer is the secret's metadata.
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.discovery.activation import ReleaseError, find_agent
from agents.models import SECRET_NAME, Agent, Secret, secret_name_problem, secret_value_problem
from channels_app.replies.secrets import SecretInfo, SecretList
from channels_app.bodies import SecretValue, validate_body
from channels_app.doors import server_door
from channels_app.errors import APIError
from channels_app.pagination import SecretPages, paginate
from channels_app.schema import BODY, list_parameters, refusals

NAME = OpenApiParameter("name", {"type": "string", "pattern": SECRET_NAME.pattern}, OpenApiParameter.PATH,
                        description="The secret's name, as an environment variable's (letters, digits and '_', "
                                    "not starting with a digit, at most 128 characters)")


SECRETS = server_door("an agent's secrets")


def operator_agent(request: Request, slug: str) -> Agent:
    """The agent an operator manages (its secrets, its eval cases), once the route's door let the caller in;
    404 when there is none."""
    try:
        return find_agent(slug)
    except ReleaseError as exc:
        raise APIError(404, exc.code, exc.message) from None


def checked_name(name: str) -> str:
    if problem := secret_name_problem(name):
        raise APIError(400, "invalid_secret_name", problem)
    return name


def set_secret(agent: Agent, name: str) -> Secret:
    found = agent.secrets.filter(name=name).first()
    if found is None:
        raise APIError(404, "secret_not_found", f"agent {agent.slug!r} has no secret {name}")
    return found


class SecretListView(APIView):
    door = SECRETS

    @extend_schema(operation_id="v1_agents_secrets_list",
                   summary="An agent's secrets by name, never their values (operators)",
                   parameters=list_parameters("Secrets", 100),
                   responses={200: SecretList, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str) -> Response:
        agent = operator_agent(request, slug)
        return paginate(SecretPages, agent.secrets.all(), request, self, SecretInfo.of)


class SecretView(APIView):
    door = SECRETS

    @extend_schema(operation_id="v1_agents_secret_retrieve",
                   summary="Who set one of an agent's secrets and when, never its value (operators)",
                   parameters=[NAME], responses={200: SecretInfo, **refusals(400, 401, 403, 404)})
    def get(self, request: Request, slug: str, name: str) -> Response:
        agent = operator_agent(request, slug)
        return Response(SecretInfo.of(set_secret(agent, checked_name(name))))

    @extend_schema(operation_id="v1_agents_secret_set",
                   summary="Set one of an agent's secrets (operators); its code reads it from its next turn or "
                           "request, no restart",
                   parameters=[NAME], request=SecretValue,
                   responses={200: OpenApiResponse(SecretInfo, description="Replaced"),
                              201: OpenApiResponse(SecretInfo, description="Set for the first time"),
                              **refusals(400, 401, 403, 404, *BODY)})
    def put(self, request: Request, slug: str, name: str) -> Response:
        agent = operator_agent(request, slug)
        checked_name(name)
        body: SecretValue = validate_body(SecretValue, request.data)
        if problem := secret_value_problem(body.value):
            raise APIError(400, "invalid_secret_value", problem)
        created = Secret.put(agent, name, body.value, by=request.user.principal_id)
        return Response(SecretInfo.of(set_secret(agent, name)), status=201 if created else 200)

    @extend_schema(operation_id="v1_agents_secret_unset",
                   summary="Unset one of an agent's secrets (operators): its name reads the environment again",
                   parameters=[NAME], responses={204: OpenApiResponse(description="Unset"),
                                                 **refusals(400, 401, 403, 404)})
    def delete(self, request: Request, slug: str, name: str) -> Response:
        agent = operator_agent(request, slug)
        if not Secret.remove(agent, checked_name(name)):
            raise APIError(404, "secret_not_found", f"agent {agent.slug!r} has no secret {name}")
        return Response(status=204)
