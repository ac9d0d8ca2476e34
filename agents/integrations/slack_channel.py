"""The functions the Slack channel hands to `wait_until`, under the module name jobs queued
before `agents.integrations.slack.channel` existed still carry (a job names its function by
module and qualname)."""
from __future__ import annotations

from agents.integrations.slack.channel import receive_message, tell_user

__all__ = ["receive_message", "tell_user"]
