"""Slack: verify signed requests (Events API and interactivity), read events
and button clicks, decide whether to engage, and reply with the official
`slack_sdk` WebClient.

Replay protection keeps the signatures it has accepted in Django's cache
framework (`AGENTSITE_SLACK_REPLAY_CACHE`, default alias "default"), so
every web process sees them: with several processes, configure a shared
backend (Redis, database or file cache). Django's default per-process
memory cache only protects each process on its own (`replay_cache_is_shared`
says which you have); the dummy cache would protect nothing and is refused.

Slack gives an endpoint three seconds to answer. Everything here is local
and quick except `SlackClient` calls (and `check_sender`, which may call
users.info once per user and cache the answer): run those after answering.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Collection, Literal, Mapping
from urllib.parse import parse_qs

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.exceptions import ImproperlyConfigured
from slack_sdk import WebClient

from .config import ProviderConfig
from .events import PayloadError, SignatureError, dig, header, load_json, text
from .outbound import Allowlist, check_url

DEFAULT_API_URL = "https://slack.com/api/"
SIGNATURE_WINDOW = 5 * 60
REPLAY_CACHE_SETTING = "AGENTSITE_SLACK_REPLAY_CACHE"
USER_INFO_SECONDS = 5 * 60
APPROVE, DENY = "approval_approve", "approval_deny"
# Slack caps a section's text at 3000 characters and a button value at 2000.
SECTION_LIMIT = 3000

Clock = Callable[[], float]


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


# --- request signatures ------------------------------------------------------

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


# --- Events API --------------------------------------------------------------

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


# --- approvals and interactivity --------------------------------------------

def escape(value: str) -> str:
    """Slack's three control characters, escaped for mrkdwn and plain text."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def approval_blocks(*, session_id: str, call_id: str, tool: str, summary: str) -> list[dict[str, Any]]:
    """A card asking to approve or deny one parked tool call. Both buttons
    carry the session and call ids; the action id says which was pressed."""
    value = json.dumps({"session": session_id, "call": call_id}, separators=(",", ":"))
    if len(value) > 2000:
        raise ValueError("session and call ids too long for a Slack button value")
    heading = f"*{escape(tool)}* is waiting for approval:\n"
    body = escape(summary).replace("```", "'''")
    room = SECTION_LIMIT - len(heading) - 8
    if len(body) > room:
        body = body[: room - 1] + "…"
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{heading}```{body}```"}},
        {"type": "actions", "block_id": f"approval:{call_id}"[:255], "elements": [
            {"type": "button", "action_id": APPROVE, "style": "primary", "value": value,
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": DENY, "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Deny"}},
        ]},
    ]


def decided_blocks(*, tool: str, decision: str, user_id: str = "", by: str = "") -> list[dict[str, Any]]:
    """What an approval card becomes once decided: no buttons, who decided
    (a Slack user, or `by` for a decision made elsewhere, e.g. the HTTP API)."""
    verb = "Approved" if decision == "approve" else "Denied"
    who = f"<@{user_id}>" if user_id else escape(by or "someone")
    return [{"type": "context", "elements": [
        {"type": "mrkdwn", "text": f"{verb} by {who}: *{escape(tool)}*"}]}]


def parse_interaction(body: bytes) -> dict[str, Any]:
    """An interactivity request's `payload=` form field, decoded."""
    form = parse_qs(body.decode("utf-8", "replace"))
    if "payload" not in form:
        raise PayloadError("an interactivity request without a payload field")
    return load_json(form["payload"][0])


@dataclass(frozen=True)
class ApprovalAction:
    session_id: str
    call_id: str
    decision: Literal["approve", "deny"]
    user_id: str
    user_team: str
    team_id: str
    channel: str
    message_ts: str
    thread_ts: str | None
    response_url: str = field(default="", repr=False, compare=False)


def parse_approval_action(payload: Mapping[str, Any]) -> ApprovalAction | None:
    """The approve/deny click in a block_actions payload, or None if it has none."""
    if payload.get("type") != "block_actions":
        return None
    for action in payload.get("actions") or []:
        if not isinstance(action, Mapping) or action.get("action_id") not in (APPROVE, DENY):
            continue
        try:
            value = json.loads(action.get("value") or "")
            session_id, call_id = value["session"], value["call"]
        except (ValueError, TypeError, KeyError) as exc:
            raise PayloadError("an approval button whose value is not the session and call ids") from exc
        return ApprovalAction(
            session_id=str(session_id), call_id=str(call_id),
            decision="approve" if action["action_id"] == APPROVE else "deny",
            user_id=text(dig(payload, "user", "id")), user_team=text(dig(payload, "user", "team_id")),
            team_id=text(dig(payload, "team", "id")),
            channel=text(dig(payload, "channel", "id")) or text(dig(payload, "container", "channel_id")),
            message_ts=text(dig(payload, "container", "message_ts")) or text(dig(payload, "message", "ts")),
            thread_ts=text(dig(payload, "container", "thread_ts")) or text(dig(payload, "message", "thread_ts")) or None,
            response_url=text(payload.get("response_url")),
        )
    return None


def approver_allowed(action: ApprovalAction, allowed: Collection[str], *, home_team_id: str | None = None) -> bool:
    """Whether the user who clicked may decide. `allowed` holds user ids, or
    "*" for anyone in the home workspace; empty allows nobody."""
    home = home_team_id or action.team_id
    if action.user_team and home and action.user_team != home:
        return False
    return "*" in allowed or action.user_id in allowed


# --- replies -----------------------------------------------------------------

class SlackClient:
    """Replies through slack_sdk's WebClient (`base_url` points it anywhere,
    e.g. a loopback fake in tests). Errors raise slack_sdk's SlackApiError.

    The SDK does its own HTTP, so the base URL is checked by the outbound
    guard once, here (`allow` as for OutboundClient), not on every request.
    """

    def __init__(self, token: str, *, base_url: str = DEFAULT_API_URL, timeout: int = 10,
                 allow: Collection[str] | None = None, cache: BaseCache | None = None):
        check_url(base_url, allow=Allowlist.parse(allow) if allow is not None else None)
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
