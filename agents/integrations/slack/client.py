"""Slack's Web API through the official `slack_sdk` WebClient: the channel's config, the sender
check (users.info), posting and streaming replies, approval cards.

Slack gives an endpoint three seconds to answer. Everything in `protocol` is
local and quick; calls here (and `check_sender`, which may call users.info once
per user and cache the answer) run after answering.
"""
from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass
from typing import Any, Collection

from django.core.cache import BaseCache, caches

from agents.integrations.config import ProviderConfig
from agents.integrations.events import dig
from agents.integrations.outbound import Allowlist, OutboundRefused, check_url, domain_admits, parse_url
from agents.integrations.slack.approvals import (
    answered_blocks, approval_blocks, decided_blocks, escape, question_blocks,
)
from agents.integrations.slack.protocol import Clock, Engagement, SlackMessage

DEFAULT_API_URL = "https://slack.com/api/"
USER_INFO_SECONDS = 5 * 60


@dataclass(frozen=True)
class SlackConfig(ProviderConfig):
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    bot_token_env: str = "SLACK_BOT_TOKEN"
    # Empty: $SLACK_API_URL, else https://slack.com/api/
    api_url: str = ""

    def signing_secret(self) -> str | None:
        return self.secret("signing_secret_env")

    def api_base(self) -> str:
        url = self.api_url or self.env("SLACK_API_URL") or DEFAULT_API_URL
        return url if url.endswith("/") else url + "/"

    def client(self, **kwargs: Any) -> "SlackClient":
        token = self.secret("bot_token_env")
        if not token:
            raise LookupError(f"no Slack bot token: set {self.bot_token_env}")
        return SlackClient(token, base_url=self.api_base(), **kwargs)


@dataclass(frozen=True)
class SenderCheck:
    allowed: bool
    reason: str = ""


def check_sender(message: SlackMessage, *, client: "SlackClient | None", home_team_id: str | None = None,
                 allow_external: bool = False, allow_guests: bool = False) -> SenderCheck:
    """Block, by default, senders from another workspace (Slack Connect) and
    guests (single- and multi-channel), which needs users.info through
    `client` (answers are cached). Without a client the check fails closed."""
    home = home_team_id or message.team_id
    if not allow_external and message.user_team and message.user_team != home:
        return SenderCheck(False, f"the sender belongs to another workspace ({message.user_team})")
    if allow_external and allow_guests:
        return SenderCheck(True)
    if client is None:
        return SenderCheck(False, "cannot check the sender without a Slack client")
    user = client.user_info(message.user)
    if user.get("deleted"):
        return SenderCheck(False, "the sender's account is deactivated")
    if not allow_external:
        same_org = bool(message.enterprise_id) and dig(user, "enterprise_user", "enterprise_id") == message.enterprise_id
        if user.get("is_stranger") or (user.get("team_id") and user.get("team_id") != home and not same_org):
            return SenderCheck(False, f"the sender belongs to another workspace ({user.get('team_id')})")
    if not allow_guests and (user.get("is_restricted") or user.get("is_ultra_restricted")):
        return SenderCheck(False, "the sender is a guest")
    return SenderCheck(True)


class SlackClient:
    """Replies through slack_sdk's WebClient (`base_url` points it anywhere,
    e.g. a loopback fake in tests). Errors raise slack_sdk's SlackApiError.

    The SDK does its own HTTP, so the base URL is checked by the outbound
    guard once, here (`allow` and `domains` as for OutboundClient), not on every request.
    """

    def __init__(self, token: str, *, base_url: str = DEFAULT_API_URL, timeout: int = 10,
                 allow: Collection[str] | None = None, cache: BaseCache | None = None,
                 domains: Collection[str] = ()):
        if domains and not domain_admits(domains, host := parse_url(base_url).host):
            raise OutboundRefused(base_url, f"{host} is not one of the agent's allowed domains")
        check_url(base_url, allow=Allowlist.parse(allow) if allow is not None else None)
        # Imported where a client is made: the SDK costs every Django process a twentieth of a
        # second to import, and only a Slack channel's delivery uses it.
        from slack_sdk import WebClient

        self.web = WebClient(token=token, base_url=base_url, timeout=timeout)
        self.cache = cache

    def __repr__(self) -> str:
        return f"SlackClient({self.web.base_url!r})"

    def post_message(self, channel: str, text: str, *, thread_ts: str | None = None,
                     blocks: list[dict[str, Any]] | None = None) -> str:
        """Post (in a thread when `thread_ts` is given); returns the new message's ts."""
        kwargs: dict[str, Any] = {"channel": channel, "text": text}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        if blocks is not None:
            kwargs["blocks"] = blocks
        return self.web.chat_postMessage(**kwargs)["ts"]

    def update_message(self, channel: str, ts: str, text: str, *, blocks: list[dict[str, Any]] | None = None) -> None:
        kwargs: dict[str, Any] = {"channel": channel, "ts": ts, "text": text}
        if blocks is not None:
            kwargs["blocks"] = blocks
        self.web.chat_update(**kwargs)

    def post_approval(self, channel: str, thread_ts: str, *, session_id: str, call_id: str, tool: str,
                      summary: str) -> str:
        """An approval card in the thread; returns its ts (to close it later)."""
        return self.post_message(channel, f"{tool} is waiting for approval", thread_ts=thread_ts,
                                 blocks=approval_blocks(session_id=session_id, call_id=call_id, tool=tool,
                                                        summary=summary))

    def close_approval(self, channel: str, ts: str, *, tool: str, decision: str, user_id: str = "",
                       by: str = "") -> None:
        """Replace the card's buttons with who decided."""
        verb = "Approved" if decision == "approve" else "Denied"
        self.update_message(channel, ts, f"{verb}: {tool}",
                            blocks=decided_blocks(tool=tool, decision=decision, user_id=user_id, by=by))

    def post_question(self, channel: str, thread_ts: str, *, session_id: str, call_id: str, question: str,
                      options: list[str], mention: bool = False) -> str:
        """The model's question in the thread, a button per option; returns its ts (to close it later).
        `mention`: a reply answers it only if it mentions the app (the channel engages on mentions)."""
        return self.post_message(channel, f"The agent asks: {escape(question)}"[:3000], thread_ts=thread_ts,
                                 blocks=question_blocks(session_id=session_id, call_id=call_id, question=question,
                                                        options=options, mention=mention))

    def close_question(self, channel: str, ts: str, *, question: str, answer: str, user_id: str = "",
                       by: str = "") -> None:
        """Replace the question's buttons with its answer and who gave it."""
        self.update_message(channel, ts, f"Answered: {escape(answer)}"[:3000],
                            blocks=answered_blocks(question=question, answer=answer, user_id=user_id, by=by))

    def post_ephemeral(self, channel: str, user: str, text: str, *, thread_ts: str | None = None) -> None:
        """A message only `user` sees (chat.postEphemeral), e.g. why a click was refused."""
        kwargs: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        self.web.chat_postEphemeral(**kwargs)

    def user_info(self, user_id: str) -> dict[str, Any]:
        """users.info's user, cached for a few minutes (sender checks run per message)."""
        cache = self.cache or caches["default"]
        key = "agentsite:slack-user:" + hashlib.sha256(f"{self.web.base_url}|{user_id}".encode()).hexdigest()
        cached = cache.get(key)
        if cached is not None:
            return cached
        user = dict(self.web.users_info(user=user_id)["user"])
        cache.set(key, user, timeout=USER_INFO_SECONDS)
        return user


class StreamedReply:
    """One Slack message that grows as a reply streams: posted on the first
    text, then edited in place no more often than `interval` seconds
    (chat.update is rate limited), and edited a last time by `finish`.

    A reply whose deltas arrive in separate calls (or processes) is resumed
    from `snapshot()`: `StreamedReply(client, ..., clock=time.time, **snapshot)`
    (a wall clock then, since the last update may have been another process's).
    """

    def __init__(self, client: SlackClient, channel: str, thread_ts: str, *, interval: float = 1.0,
                 clock: Clock = time.monotonic, ts: str | None = None, sent: str = "", last_update: float = 0.0):
        self.client = client
        self.channel = channel
        self.thread_ts = thread_ts
        self.interval = interval
        self.clock = clock
        self.ts = ts
        self._sent = sent
        self._last_update = last_update

    def snapshot(self) -> dict[str, Any]:
        """What resuming this reply needs (JSON values)."""
        return {"ts": self.ts, "sent": self._sent, "last_update": self._last_update}

    def update(self, text: str) -> None:
        if not text or text == self._sent:
            return
        if self.ts is None:
            self.ts = self.client.post_message(self.channel, text, thread_ts=self.thread_ts)
        elif self.clock() - self._last_update >= self.interval:
            self.client.update_message(self.channel, self.ts, text)
        else:
            return
        self._sent, self._last_update = text, self.clock()

    def finish(self, text: str) -> str:
        """The final text, sent whatever the interval; returns the message ts."""
        if self.ts is None:
            self.ts = self.client.post_message(self.channel, text, thread_ts=self.thread_ts)
        elif text != self._sent:
            self.client.update_message(self.channel, self.ts, text)
        self._sent = text
        return self.ts


@dataclass(frozen=True)
class SlackChannelConfig(SlackConfig):
    """A Slack channel's settings, as /info shows them (variable names, never secrets).

    `approvers`: Slack user ids who may click Approve / Deny, "*" for anyone in
    the thread's workspace; None (the default) means the user who started the
    thread's conversation with the bot.
    """

    engagement: Engagement = Engagement.MENTIONS
    allow_external: bool = False
    allow_guests: bool = False
    approvers: tuple[str, ...] | None = None
    streaming: bool = True
    stream_interval: float = 1.0
    # Socket Mode: the server connects out with the app-level token this names (no public URL).
    socket_mode: bool = False
    app_token_env: str = "SLACK_APP_TOKEN"


@functools.lru_cache(maxsize=16)
def _cached_client(token: str, base_url: str) -> SlackClient:
    # Building one resolves the API host for the outbound guard: once per process, not per event.
    return SlackClient(token, base_url=base_url)


def client_for(config: SlackConfig) -> SlackClient:
    """A client with the bot token the config names (read now, so a rotated token is picked up)."""
    token = config.secret("bot_token_env")
    if not token:
        raise LookupError(f"no Slack bot token: set {config.bot_token_env}")
    return _cached_client(token, config.api_base())


class LazyClient:
    """A SlackClient built on first use (most streamed deltas make no request)."""

    def __init__(self, config: SlackConfig):
        self.config = config

    def __getattr__(self, name: str) -> Any:
        return getattr(client_for(self.config), name)
