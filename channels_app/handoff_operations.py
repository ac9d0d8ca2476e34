"""A session's handoff routes as operations of each deployed agent, with that agent's models.

Which models a session may move to is its agent's list: one templated
operation could only take any string, and a `to` it offered would be a 400
`model_not_allowed` for most agents. So each active release gets its own
review and handoff operations (`/duo/v1/session/{session_id}/handoff`), as its
tools get their own (channels_app.tool_operations). The handoff's `to` lists
the release's models configured here (another would be a 424 `no_credential`);
the review's takes any model and says in its body why a handoff to it would be
refused. The templated path stays only while no agent is deployed.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from agents.models import Agent
from sessions.handoff import ready_models

TEMPLATED = "/{slug}/v1/session/{session_id}/handoff"
REVIEW, PERFORM = "v1_session_handoff_retrieve", "v1_session_handoff_create"
CREATE = "v1_session_create"


def add_handoff_operations(result: dict[str, Any], scope: list[str] | None = None) -> dict[str, Any]:
    """Each deployed agent's (of `scope`, if given) handoff operations, in place of the templated ones,
    and a link from a created session to its review on each agent."""
    paths = result.get("paths", {})
    generic = paths.get(TEMPLATED, {})
    if not {"get", "post"} <= set(generic):
        return result
    agents = Agent.objects.deployed().select_related("active_deployment").order_by("slug")
    if scope is not None:
        agents = agents.filter(slug__in=scope)
    reviews: dict[str, dict[str, Any]] = {}
    for agent in agents:
        suffix = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", agent.slug))
        paths[f"/{agent.slug}/v1/session/{{session_id}}/handoff"] = {
            "get": own(generic["get"], REVIEW, suffix),
            "post": handoff_operation(generic["post"], suffix, ready_models(agent.active_deployment))}
        reviews[f"HandoffReview{suffix}"] = {
            "operationId": f"{REVIEW}_{suffix}", "parameters": {"session_id": "$response.body#/sessionId"},
            "description": f"Review a handoff of the session (on agent {agent.slug}) to another model"}
    if not reviews:
        return result
    del paths[TEMPLATED]
    for operations in paths.values():
        create = operations.get("post", {})
        if create.get("operationId") == CREATE:
            for status in ("201", "202"):
                create["responses"].get(status, {}).setdefault("links", {}).update(reviews)
    return result


def own(generic: dict[str, Any], operation_id: str, suffix: str) -> dict[str, Any]:
    """The templated operation on one agent's path: its own id, no `slug` parameter."""
    operation = copy.deepcopy(generic)
    operation["operationId"] = f"{operation_id}_{suffix}"
    operation["parameters"] = [p for p in operation.get("parameters", [])
                               if not (p["in"] == "path" and p["name"] == "slug")]
    return operation


def handoff_operation(generic: dict[str, Any], suffix: str, models: list[str]) -> dict[str, Any]:
    operation = own(generic, PERFORM, suffix)
    to: dict[str, Any] = {"type": "string", "enum": models, "description": (
        "One of the agent's models that is configured on this server (GET /<slug>/v1/info lists its models)")}
    if not models:  # nothing to move to: no `to` is valid
        to = {"not": {}, "description": "No model of this agent is configured on this server"}
    for content in operation["requestBody"]["content"].values():
        content["schema"] = {"allOf": [content["schema"]], "properties": {"to": to}}
    return operation
