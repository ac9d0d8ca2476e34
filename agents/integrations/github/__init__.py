"""GitHub (GitHub.com and Enterprise Server): `protocol` (signature check, deliveries as
`RepoEvent`s), `client` (config, App and token credentials, the REST client), `channel`
(`github_channel(...)`).

The protocol and client names are importable from the package; the channel builder is imported
from `channel` (it builds on `repo_channels`, which imports the protocols).
"""
from __future__ import annotations

from agents.integrations.github.client import (
    API_VERSION, COMMIT_STATES, DEFAULT_API_URL, INSTALLATION_TOKENS, REPO_NAME, Clock, GitHubApp, GitHubClient,
    GitHubConfig, InstallationToken, TokenAuth, TokenCache, base_headers, repo_path,
)
from agents.integrations.github.protocol import normalize_event, parse_delivery, verify_signature

__all__ = [
    "API_VERSION", "COMMIT_STATES", "Clock", "DEFAULT_API_URL", "GitHubApp", "GitHubClient", "GitHubConfig",
    "INSTALLATION_TOKENS", "InstallationToken", "REPO_NAME", "TokenAuth", "TokenCache", "base_headers",
    "normalize_event", "parse_delivery", "repo_path", "verify_signature",
]
