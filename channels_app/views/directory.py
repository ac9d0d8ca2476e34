"""`GET /v1/models`: the models this server runs, whether their providers answer, and the sessions on each.

For operators and the loopback caller, as the release routes (a member 403, no policy 401):
it names the server's providers and base URLs' health, which is the operators' business.
It counts every agent's sessions, so a token scoped to some agents is refused (403 `scoped_token`).
"""
from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from drf_spectacular.utils import extend_schema
from pydantic import ConfigDict
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.doors import server_door
from channels_app.responses import Reply
from channels_app.schema import refusals
from sessions.handoff.directory import DirectoryEntry, model_directory


class ModelEntry(Reply):
    """One model: `provider:model`, whether a credential is set for it, whether its provider answered the
    last health probe (null: not probed, nothing configured), the sessions bound to it and the agents
    (by slug) whose active release lists it among its models or fallbacks."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)
    id: str
    provider: str
    model: str
    configured: bool
    reachable: bool | None
    checked_at: datetime | None
    # Only when something is wrong: the probe's failure, or why the model cannot be used here.
    error: str | None = None
    sessions: int
    agents: list[str]
    # The server's default model, which agents that name none are deployed with.
    default: bool

    @classmethod
    def of(cls, entry: DirectoryEntry) -> ModelEntry:
        problem = {"error": entry.error} if entry.error else {}
        return cls(id=entry.id, provider=entry.provider, model=entry.model, configured=entry.configured,
                   reachable=entry.reachable, checked_at=entry.checked_at, sessions=entry.sessions,
                   agents=entry.agents, default=entry.default, **problem)


class ModelDirectory(Reply):
    omit_unset: ClassVar[bool] = True  # `error` only where there is one

    models: list[ModelEntry]


class ModelDirectoryView(APIView):
    # Every agent's sessions are counted: a token scoped to some agents is refused it.
    door = server_door("the models and their health")

    @extend_schema(operation_id="v1_models_list",
                   summary="The models of the active releases and the server's default: configured, reachable "
                           "(a cached health probe), sessions bound (operators)",
                   responses={200: ModelDirectory, **refusals(401, 403)})
    def get(self, request: Request) -> Response:
        return Response(ModelDirectory(models=[ModelEntry.of(e) for e in model_directory()]))
