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
from agents.integrations.bitbucket import BitbucketConfig
from agents.integrations.github import GitHubConfig
from agents.integrations.gitlab import GitLabConfig
from agents.integrations.slack import SlackConfig

DEFAULT_CONFIGS = {"github": GitHubConfig, "gitlab": GitLabConfig, "bitbucket": BitbucketConfig,
                   "slack": SlackConfig}


def provider_config(agent: Any, session: Any, kind: str) -> Any:
    """The config of the agent's first channel of `kind` (by id), else the default one."""
    deployment = session.deployment if session is not None else getattr(agent, "active_deployment", None)
    if deployment is not None:
        channels = load_deployment(deployment).channels
        for channel_id in sorted(channels):
            declared = channels[channel_id].channel
            if declared.kind == kind and declared.config is not None:
                return declared.config
    return DEFAULT_CONFIGS[kind]()


def provider_client(agent: Any, session: Any, kind: str) -> Any:
    return provider_config(agent, session, kind).client()
