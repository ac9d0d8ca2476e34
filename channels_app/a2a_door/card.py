"""An agent's card (`/<slug>/.well-known/agent-card.json`): who it is, where its JSON-RPC endpoint is,
what it can do (its tools, as skills), and how to authenticate (a personal token as a bearer)."""
from __future__ import annotations

from a2a.types import a2a_pb2 as a2a

from channels_app.ownership import get_agent

PROTOCOL_VERSIONS = ("1.0", "0.3")  # one endpoint speaks both
BEARER = "bearer"
MODES = ["text/plain", "application/json"]


def rpc_url(origin: str, slug: str) -> str:
    return f"{origin}/{slug}/a2a"


def card(slug: str, origin: str) -> a2a.AgentCard:
    """The card of agent `slug` as served at `origin` (404 APIError when there is no such agent)."""
    agent = get_agent(slug)
    deployment = agent.active_deployment
    tools = deployment.manifest.get("tools", []) if deployment else []
    skills = [a2a.AgentSkill(id=tool["name"], name=tool["name"], tags=["tool"],
                             description=tool.get("description") or f"The tool {tool['name']}.")
              for tool in tools]
    if not skills:  # a card names at least one skill: a tool-less agent converses
        skills = [a2a.AgentSkill(id="conversation", name="conversation", tags=["chat"],
                                 description="Talk with the agent.")]
    return a2a.AgentCard(
        name=agent.name or agent.slug,
        description=agent.description or f"The agent {agent.slug} on agentsite.",
        supported_interfaces=[a2a.AgentInterface(url=rpc_url(origin, slug), protocol_binding="JSONRPC",
                                                 protocol_version=version) for version in PROTOCOL_VERSIONS],
        version=str(deployment.version if deployment else 0),
        documentation_url=f"{origin}/docs/serving-a2a",
        capabilities=a2a.AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        security_schemes={BEARER: a2a.SecurityScheme(http_auth_security_scheme=a2a.HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="agentsite personal token (ast_…)",
            description="A personal token from POST /v1/tokens; a loopback caller needs none on the embedded default."))},
        security_requirements=[a2a.SecurityRequirement(schemes={BEARER: a2a.StringList()})],
        default_input_modes=MODES, default_output_modes=MODES, skills=skills,
    )
