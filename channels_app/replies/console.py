"""The body of the console-agent routes: a release and the data it was saved from."""
from __future__ import annotations

from typing import Any

from agents.console.spec import AgentSpec
from agents.discovery.releases import CONSOLE
from agents.models import Deployment
from channels_app.replies.base import Reply
from channels_app.replies.releases import Release


class AgentDefinition(Reply):
    """`kind`: what the release was made from (`console`, or a `folder` or `repo` shown as data);
    `definition`: the agent as data, what `PUT /v1/agents/<slug>` takes."""

    slug: str
    kind: str
    release: Release
    definition: dict[str, Any]

    @classmethod
    def of(cls, deployment: Deployment, spec: AgentSpec) -> AgentDefinition:
        return cls(slug=deployment.agent.slug,
                   kind=CONSOLE if deployment.source_kind == CONSOLE else deployment.source_kind,
                   release=Release.of(deployment, deployment.agent.active_deployment_id),
                   definition=spec.model_dump(mode="json", by_alias=True))
