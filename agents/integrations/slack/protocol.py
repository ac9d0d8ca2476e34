"""Slack's side of a request: signatures (Events API and interactivity), events read into
`SlackMessage`s, and whether the bot engages with one.

Replay protection keeps the signatures it has accepted in Django's cache
framework (`AGENTSITE_SLACK_REPLAY_CACHE`, default alias "default"), so
every web process sees them: with several processes, configure a shared
backend (Redis, database or file cache). Django's default per-process
memory cache only protects each process on its own (`replay_cache_is_shared`
says which you have); the dummy cache would protect nothing and is refused.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Literal, Mapping

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured

from agents.integrations.events import SignatureError, dig, header, load_json, text

SIGNATURE_WINDOW = 5 * 60
REPLAY_CACHE_SETTING = "AGENTSITE_SLACK_REPLAY_CACHE"
Clock = Callable[[], float]


def replay_cache() -> BaseCache:
    return caches[getattr(settings, REPLAY_CACHE_SETTING, "default")]


def replay_cache_is_shared(cache: BaseCache | None = None) -> bool:
    """Whether the replay cache is seen by every process (not per-process memory)."""
    return not isinstance(cache or replay_cache(), (LocMemCache, DummyCache))


def signature_for(signing_secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


def verify_request(signing_secret: str | None, headers: Mapping[str, str], body: bytes, *,
                   clock: Clock = time.time, cache: BaseCache | None = None) -> None:
    """Check a request from Slack (events or interactivity). Raises SignatureError.

    1. X-Slack-Request-Timestamp within five minutes of now, either way;
    2. X-Slack-Signature equal, in constant time, to `v0=` + HMAC-SHA256 of
       `v0:{timestamp}:{raw body}` under the signing secret;
    3. that signature not accepted before: it is recorded in the shared
       cache for as long as it could still pass step 1.
    """
    if not signing_secret:
        raise SignatureError("no Slack signing secret is configured, so no request can be verified")
    timestamp = header(headers, "X-Slack-Request-Timestamp") or ""
    signature = header(headers, "X-Slack-Signature") or ""
    if not timestamp or not signature:
        raise SignatureError("the request has no X-Slack-Request-Timestamp or X-Slack-Signature header")
    if not timestamp.isdigit():
        raise SignatureError("X-Slack-Request-Timestamp is not a number of seconds")
    skew = clock() - int(timestamp)
    if abs(skew) > SIGNATURE_WINDOW:
        raise SignatureError("the request is too old" if skew > 0 else "the request is dated in the future")
    if not hmac.compare_digest(signature_for(signing_secret, timestamp, body).encode(), signature.encode()):
        raise SignatureError("X-Slack-Signature does not match the body")

    cache = cache or replay_cache()
    if isinstance(cache, DummyCache):
        raise ImproperlyConfigured(f"Slack replay protection needs a real cache; {REPLAY_CACHE_SETTING} names a "
                                   "dummy cache")
    key = "agentsite:slack-signature:" + hashlib.sha256(signature.encode()).hexdigest()
    # add() stores only if absent, atomically in every backend that shares
    # state: the one request that wins is the one accepted.
    if not cache.add(key, timestamp, timeout=2 * SIGNATURE_WINDOW):
        raise SignatureError("the request was already received (replayed)")


def url_verification_challenge(payload: Mapping[str, Any]) -> str | None:
    """The challenge to echo back if this is Slack's URL check, else None."""
    if payload.get("type") == "url_verification" and isinstance(payload.get("challenge"), str):
        return payload["challenge"]
    return None


def parse_body(body: bytes) -> dict[str, Any]:
    """An Events API body (JSON)."""
    return load_json(body)


@dataclass(frozen=True)
class SlackMessage:
    """A message for the bot: an app_mention, or a plain message (DMs, thread replies)."""

    kind: Literal["app_mention", "message"]
    team_id: str
    channel: str
    user: str
    text: str                    # the bot's own mention removed
    ts: str
    thread_ts: str | None = None
    channel_type: str = ""       # channel, group, im, mpim
    user_team: str = ""          # the sender's workspace (differs for Slack Connect senders)
    enterprise_id: str = ""
    event_id: str = ""
    bot_user_id: str = ""
    mentions_bot: bool = False
    raw_text: str = field(default="", repr=False)
    payload: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def conversation_ts(self) -> str:
        """The thread this message is in, or starts when the bot replies to it."""
        return self.thread_ts or self.ts

    @property
    def continuation_key(self) -> str:
        return f"{self.channel}:{self.conversation_ts}"

    @property
    def in_thread(self) -> bool:
        return bool(self.thread_ts) and self.thread_ts != self.ts


def mention_pattern(user_id: str) -> re.Pattern:
    return re.compile(r"<@" + re.escape(user_id) + r"(?:\|[^>]*)?>")


def parse_event(payload: Mapping[str, Any], *, bot_user_id: str | None = None, bot_id: str | None = None,
                allow_bots: bool = False) -> SlackMessage | None:
    """The message an event_callback carries, or None when it is one to ignore:
    other event types, message subtypes (edits, deletions, joins, bot
    messages), the bot's own messages, and other bots unless `allow_bots`.

    `bot_user_id` defaults to the payload's `authorizations[0].user_id`.
    """
    if payload.get("type") != "event_callback":
        return None
    event = payload.get("event")
    if not isinstance(event, Mapping) or event.get("type") not in ("app_mention", "message"):
        return None
    if event.get("subtype"):
        return None
    bot_user_id = bot_user_id or text(dig(payload, "authorizations", 0, "user_id"))
    user = text(event.get("user"))
    if not user or (bot_user_id and user == bot_user_id):
        return None
    if event.get("bot_id") and (not allow_bots or event.get("bot_id") == bot_id):
        return None
    raw = text(event.get("text"))
    mentioned = bool(bot_user_id) and bool(mention_pattern(bot_user_id).search(raw))
    cleaned = mention_pattern(bot_user_id).sub("", raw) if bot_user_id else raw
    return SlackMessage(
        kind=event["type"], team_id=text(payload.get("team_id")) or text(event.get("team")),
        channel=text(event.get("channel")), user=user, text=re.sub(r"[ \t]+", " ", cleaned).strip(),
        ts=text(event.get("ts")), thread_ts=text(event.get("thread_ts")) or None,
        channel_type=text(event.get("channel_type")), user_team=text(event.get("user_team")),
        enterprise_id=text(payload.get("enterprise_id")), event_id=text(payload.get("event_id")),
        bot_user_id=bot_user_id or "", mentions_bot=mentioned or event["type"] == "app_mention",
        raw_text=raw, payload=payload,
    )


class Engagement(StrEnum):
    MENTIONS = "mentions"   # mentions and direct messages only
    THREADS = "threads"     # also every reply in a thread the bot is already in


def should_engage(message: SlackMessage, *, engagement: Engagement = Engagement.MENTIONS,
                  bot_in_thread: bool = False) -> bool:
    """Whether the bot answers this message. `bot_in_thread`: the caller knows
    a conversation exists for `message.continuation_key`.

    A channel message that mentions the bot also arrives as an app_mention;
    only the app_mention engages, so one message never starts two turns.
    """
    if message.kind == "app_mention":
        return True
    if message.channel_type == "im":
        return True
    if message.mentions_bot:
        return False
    return engagement is Engagement.THREADS and message.in_thread and bot_in_thread
