"""`{% mcp_authorizations agent as rows %}`: the agent's OAuth MCP servers and whether each is authorized.

For the admin's agent page (templates/admin/agents/agent/change_form.html), which shows facts, never tokens.
"""
from __future__ import annotations

from typing import Any

from django import template

from agents.mcpauth.stored import with_status
from agents.models import Agent

register = template.Library()


@register.simple_tag
def mcp_authorizations(agent: Agent | None) -> list[dict[str, Any]]:
    if agent is None or agent.pk is None or agent.active_deployment is None:
        return []
    return [m for m in with_status(agent, agent.active_deployment.manifest.get("mcp", [])) if m.get("oauth")]
