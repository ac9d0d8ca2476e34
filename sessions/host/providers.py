"""`ctx.host.github`, `.gitlab`, `.bitbucket`, `.slack`: API clients with the agent's credentials.

The credentials are those of the agent's channel of that kind
(`agent/channels/<id>.py` built with `github_channel(...)`, `slack_channel(...)`
etc.) when it declares one, so a tool answers as the channel does; otherwise
the default environment variables (`GITHUB_TOKEN`, `SLACK_BOT_TOKEN`, ...).
A missing credential raises LookupError naming the variable to set.
"""
from __future__ import annotations

from typing import Any

from agents.discovery import load_deployment
from agents.integrations.outbound import OutboundClient
from agents.integrations.bitbucket import BitbucketConfig
from agents.integrations.github import GitHubConfig
from agents.integrations.gitlab import GitLabConfig
from agents.integrations.slack import SlackConfig

DEFAULT_CONFIGS = {"github": GitHubConfig, "gitlab": GitLabConfig, "bitbucket": BitbucketConfig,
                   "slack": SlackConfig}


def bound_release(agent: Any, session: Any) -> Any:
    """The release a context runs: its session's (pinned), else the agent's active one."""
    return session.deployment if session is not None else getattr(agent, "active_deployment", None)


def release_domains(agent: Any, session: Any) -> tuple[str, ...]:
    """The allowed domains of the release a context runs (empty: the server's own rules alone)."""
    deployment = bound_release(agent, session)
    return tuple(deployment.allowed_domains or ()) if deployment is not None else ()


def provider_config(agent: Any, session: Any, kind: str) -> Any:
    """The config of the agent's first channel of `kind` (by id), else the default one."""
    deployment = bound_release(agent, session)
    if deployment is not None:
        channels = load_deployment(deployment).channels
        for channel_id in sorted(channels):
            declared = channels[channel_id].channel
            if declared.kind == kind and declared.config is not None:
                return declared.config
    return DEFAULT_CONFIGS[kind]()


def provider_client(agent: Any, session: Any, kind: str) -> Any:
    """The client, its requests held to the release's allowed domains when it declares some."""
    config = provider_config(agent, session, kind)
    domains = release_domains(agent, session)
    if not domains:
        return config.client()
    if kind == "slack":  # the Slack SDK does its own HTTP: its base URL is checked once
        return config.client(domains=domains)
    return config.client(outbound=OutboundClient(domains=domains))
