"""Bitbucket Cloud and Data Center: `protocol` (signature check, deliveries of both editions
as `RepoEvent`s), `client` (config, the REST client: pull request comments), `channel`
(`bitbucket_channel(...)`).

The protocol and client names are importable from the package; the channel builder is imported
from `channel` (it builds on `repo_channels`, which imports the protocols).
"""
from __future__ import annotations

from agents.integrations.bitbucket.client import CLOUD_API_URL, SLUG, BitbucketClient, BitbucketConfig, repo_parts
from agents.integrations.bitbucket.protocol import (
    CLOUD_ACTIONS, DATA_CENTER_ACTIONS, SENDER_TYPES, Edition, data_center_repo, edition_of, normalize_cloud,
    normalize_data_center, normalize_event, parse_delivery, verify_signature,
)

__all__ = [
    "BitbucketClient", "BitbucketConfig", "CLOUD_ACTIONS", "CLOUD_API_URL", "DATA_CENTER_ACTIONS", "Edition",
    "SENDER_TYPES", "SLUG", "data_center_repo", "edition_of", "normalize_cloud", "normalize_data_center",
    "normalize_event", "parse_delivery", "repo_parts", "verify_signature",
]
