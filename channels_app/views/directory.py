"""`GET /v1/models`: the models this server runs, whether their providers answer, and the sessions on each.

For operators and the loopback caller, as the release routes (a member 403, no policy 401):
it names the server's providers and base URLs' health, which is the operators' business.
It counts every agent's sessions, so a token scoped to some agents is refused (403 `scoped_token`).
"""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.doors import server_door
from channels_app.replies.models import ModelDirectory, ModelEntry
from channels_app.schema import refusals
from sessions.handoff.directory import model_directory


class ModelDirectoryView(APIView):
    # Every agent's sessions are counted: a token scoped to some agents is refused it.
    door = server_door("the models and their health")

    @extend_schema(operation_id="v1_models_list",
                   summary="The models of the active releases and the server's default: configured, reachable "
                           "(a cached health probe), sessions bound (operators)",
                   responses={200: ModelDirectory, **refusals(401, 403)})
    def get(self, request: Request) -> Response:
        return Response(ModelDirectory(models=[ModelEntry.of(e) for e in model_directory()]))
