"""Slack: `protocol` (signed requests, events, engagement), `approvals` (Block Kit cards and
the clicks on them), `client` (config, the sender check, the slack_sdk client, streamed replies),
`channel` (`slack_channel(...)`: its `/events` and `/interactivity` routes), `socket_mode` (its
Socket Mode connection) and `replies` (its events map).

The protocol, card and client names are importable from the package; the channel is imported
from `channel`.
"""
from __future__ import annotations

from agents.integrations.slack.approvals import (
    APPROVE, DENY, SECTION_LIMIT, ApprovalAction, approval_blocks, approver_allowed, decided_blocks, escape,
    parse_approval_action, parse_interaction,
)
from agents.integrations.slack.client import (
    DEFAULT_API_URL, USER_INFO_SECONDS, LazyClient, SenderCheck, SlackChannelConfig, SlackClient, SlackConfig,
    StreamedReply, check_sender, client_for,
)
from agents.integrations.slack.protocol import (
    REPLAY_CACHE_SETTING, SIGNATURE_WINDOW, Clock, Engagement, SlackMessage, mention_pattern, parse_body,
    parse_event, replay_cache, replay_cache_is_shared, should_engage, signature_for, url_verification_challenge,
    verify_request,
)

__all__ = [
    "APPROVE", "ApprovalAction", "Clock", "DEFAULT_API_URL", "DENY", "Engagement", "LazyClient",
    "REPLAY_CACHE_SETTING", "SECTION_LIMIT", "SIGNATURE_WINDOW", "SenderCheck", "SlackChannelConfig",
    "SlackClient", "SlackConfig", "SlackMessage", "StreamedReply", "USER_INFO_SECONDS", "approval_blocks",
    "approver_allowed", "check_sender", "client_for", "decided_blocks", "escape", "mention_pattern",
    "parse_approval_action", "parse_body", "parse_event", "parse_interaction", "replay_cache",
    "replay_cache_is_shared", "should_engage", "signature_for", "url_verification_challenge", "verify_request",
]
