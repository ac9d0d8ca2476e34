"""The handoff (`POST …/handoff`) as an operation of each deployed agent, with that agent's models.

Which models a session may move to is its agent's list: one templated
operation could only take any string, and a `to` it offered would be a 400
`model_not_allowed` for most agents. So each active release gets its own
handoff operation (`/duo/v1/session/{session_id}/handoff`) whose `to` lists
the release's models that are configured here (another would be a 424
`no_credential`), as each agent's tools get their own operations
(channels_app.tool_operations). The review (GET) stays templated: it answers
any model, saying in its body why a handoff to it would be refused.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from agents.models import Agent
from sessions.handoff import ready_models

TEMPLATED = "/{slug}/v1/session/{session_id}/handoff"
PERFORM = "v1_session_handoff_create"


def add_handoff_operations(result: dict[str, Any], scope: list[str] | None = None) -> dict[str, Any]:
    """Each deployed agent's (of `scope`, if given) handoff operation, in place of the templated one."""
    paths = result.get("paths", {})
    generic = paths.get(TEMPLATED, {}).get("post")
    if generic is None:
        return result
    agents = Agent.objects.deployed().select_related("active_deployment").order_by("slug")
    if scope is not None:
        agents = agents.filter(slug__in=scope)
    for agent in agents:
        suffix = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", agent.slug))
        paths[f"/{agent.slug}/v1/session/{{session_id}}/handoff"] = {
            "post": handoff_operation(generic, suffix, ready_models(agent.active_deployment))}
    del paths[TEMPLATED]["post"]  # no agent, no handoff: the route answers 404 for any slug
    return result


def handoff_operation(generic: dict[str, Any], suffix: str, models: list[str]) -> dict[str, Any]:
    operation = copy.deepcopy(generic)
    operation["operationId"] = f"{PERFORM}_{suffix}"
    operation["parameters"] = [p for p in operation.get("parameters", [])
                               if not (p["in"] == "path" and p["name"] == "slug")]
    to: dict[str, Any] = {
        "description": "One of the agent's models that is configured on this server (GET /<slug>/v1/info lists "
                       "the agent's models)"}
    if models:
        to.update(type="string", enum=models)
    else:
        to.update({"not": {}, "description": "No model of this agent is configured on this server"})
    for content in operation["requestBody"]["content"].values():
        content["schema"] = {"allOf": [content["schema"]], "properties": {"to": to}}
    return operation
