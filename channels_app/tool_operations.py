"""One OpenAPI operation per deployed server tool, with the tool's own input schema.

`POST /{slug}/v1/tools/{tool_name}/call` takes any JSON object as `input`,
and the tool then checks it against its own model (a 400 `invalid_input`):
one operation cannot say what every tool of every agent takes. So each
active release's server tools get their own path (`/support/v1/tools/
lookup_order/call`) whose body says it, and the templated operation is
left to the tools a session decides (workspace, MCP) and unknown names.

Tool schemas are pydantic's: their `$defs` move into the document's
components, and every string in them gets the document's rule for text
(no NUL), which `load_json` enforces before any tool sees its input.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from agents.models import Agent
from channels_app.bodies import NO_NUL

TEMPLATED = "/{slug}/v1/tools/{tool_name}/call"


def add_tool_operations(result: dict[str, Any], scope: list[str] | None = None) -> dict[str, Any]:
    """Each active release's server tools as operations; with `scope` (a personal token's agents),
    those agents' only: the document never names an agent the caller may not reach."""
    generic = result.get("paths", {}).get(TEMPLATED, {}).get("post")
    if generic is None:
        return result
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    declared: set[str] = set()
    calls: dict[str, dict[str, Any]] = {}
    agents = Agent.objects.deployed().order_by("slug")
    if scope is not None:
        agents = agents.filter(slug__in=scope)
    for agent in agents:
        for tool in agent.active_deployment.manifest.get("tools", []):
            declared.add(tool["name"])
            if tool.get("execution", "server") == "server":
                path = f"/{agent.slug}/v1/tools/{tool['name']}/call"
                operation = tool_operation(generic, agent.slug, tool, schemas)
                result["paths"][path] = {"post": operation}
                calls[f"Call{operation['operationId'][len('call_'):]}"] = {
                    "operationId": operation["operationId"],
                    "description": f"{tool['name']} bound to the session (its input generated), on agent {agent.slug}",
                    "requestBody": {"sessionId": "$response.body#/sessionId"}}
    for operations in result["paths"].values():
        create = operations.get("post", {})
        if create.get("operationId") == "v1_session_create":
            for status in ("201", "202"):
                create["responses"].get(status, {}).setdefault("links", {}).update(calls)
    for parameter in generic.get("parameters", []):
        if parameter["name"] == "tool_name" and declared:
            parameter["schema"]["not"] = {"enum": sorted(declared)}
            parameter["description"] = ("A workspace or MCP tool the session is offered; an agent's own tools "
                                        "have operations of their own")
    return result


def tool_operation(generic: dict[str, Any], slug: str, tool: dict[str, Any], schemas: dict[str, Any]) -> dict:
    prefix = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", f"{slug} {tool['name']}"))
    input_schema = copy.deepcopy(tool.get("inputSchema") or {"type": "object"})
    for name, definition in input_schema.pop("$defs", {}).items():
        schemas[f"{prefix}{name}"] = storable(definition, prefix)
    body = {"type": "object", "additionalProperties": False, "properties": {
        "input": storable(input_schema, prefix),
        "sessionId": {"anyOf": [{"type": "string", "maxLength": 40, "pattern": NO_NUL}, {"type": "null"}],
                      "description": "Bind the call to this session (a gated tool then waits for a decision)"},
    }}
    if input_schema.get("required"):
        body["required"] = ["input"]
    operation = copy.deepcopy(generic)
    operation.update(operationId=f"call_{prefix}", summary=f"Call {tool['name']}: {tool.get('description', '')}",
                     parameters=[p for p in operation.get("parameters", []) if p["in"] != "path"],
                     requestBody={"required": True, "content": {"application/json": {"schema": body}}})
    # A gated call bound to a session waits (202): its id is what the approval route takes.
    operation["responses"]["202"]["links"] = {"Decide": {
        "operationId": "v1_session_approvals_create",
        "parameters": {"slug": slug, "session_id": "$request.body#/sessionId", "call_id": "$response.body#/callId"}}}
    return operation


def storable(schema: Any, prefix: str) -> Any:
    """`schema` with its `$defs` references renamed to components, and NUL refused in every string."""
    if isinstance(schema, list):
        return [storable(item, prefix) for item in schema]
    if not isinstance(schema, dict):
        return schema
    found = {key: storable(value, prefix) if key not in ("enum", "const", "default", "examples") else value
             for key, value in schema.items()}
    if isinstance(found.get("$ref"), str) and found["$ref"].startswith("#/$defs/"):
        found["$ref"] = f"#/components/schemas/{prefix}{found['$ref'][len('#/$defs/'):]}"
    kinds = found.get("type")
    if kinds == "string" or (isinstance(kinds, list) and "string" in kinds):
        if "pattern" in found:
            found.setdefault("allOf", []).append({"pattern": NO_NUL})
        else:
            found["pattern"] = NO_NUL
    if kinds == "object" or (isinstance(kinds, list) and "object" in kinds):
        found.setdefault("propertyNames", {"pattern": NO_NUL})
        # Keys a model ignores still reach `load_json`, which refuses NUL anywhere in them.
        found.setdefault("additionalProperties", {"$ref": "#/components/schemas/JSONValue"})
    return found
