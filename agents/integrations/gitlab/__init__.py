"""GitLab (GitLab.com and self-managed): `protocol` (token check, deliveries as `RepoEvent`s),
`client` (config, the REST client: notes and commit statuses), `channel` (`gitlab_channel(...)`).

The protocol and client names are importable from the package; the channel builder is imported
from `channel` (it builds on `repo_channels`, which imports the protocols).
"""
from __future__ import annotations

from agents.integrations.gitlab.client import (
    COMMIT_STATES, DEFAULT_API_URL, PROJECT_PATH, GitLabClient, GitLabConfig, project_path,
)
from agents.integrations.gitlab.protocol import (
    MERGE_REQUEST_ACTIONS, NOTE_ACTIONS, TOKEN_BOT, normalize_event, parse_delivery, verify_token,
)

__all__ = [
    "COMMIT_STATES", "DEFAULT_API_URL", "GitLabClient", "GitLabConfig", "MERGE_REQUEST_ACTIONS", "NOTE_ACTIONS",
    "PROJECT_PATH", "TOKEN_BOT", "normalize_event", "parse_delivery", "project_path", "verify_token",
]
