"""What the Slack channel tests share: a fake of Slack's Web API that remembers
the messages in each thread, and signed Events API / interactivity requests."""
from __future__ import annotations

import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from agents.integrations.slack import signature_for
from tests.agents.integrations.fakeapi import Answer, FakeAPI, Recorded

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
TEAM, BOT, CHANNEL = "T061EG9R6", "U0LAN0Z89", "C0LAN2Q65"
ADA, BOB, GUEST, OUTSIDER = "U061F7AUR", "U0BOB0001", "U0GUEST01", "U0OUT0001"


@dataclass
class Posted:
    channel: str
    ts: str
    thread_ts: str | None
    text: str
    blocks: list[dict[str, Any]] | None
    edits: int = 0
    history: list[str] = field(default_factory=list)


class FakeSlack(FakeAPI):
    """chat.postMessage / chat.update / chat.postEphemeral / users.info, with the bot token checked."""

    def __init__(self):
        super().__init__()
        self.users = {
            ADA: {"id": ADA, "team_id": TEAM, "name": "ada"},
            BOB: {"id": BOB, "team_id": TEAM, "name": "bob"},
            GUEST: {"id": GUEST, "team_id": TEAM, "name": "contractor", "is_restricted": True},
            OUTSIDER: {"id": OUTSIDER, "team_id": "T0OTHERWS", "name": "partner", "is_stranger": True},
        }
        self.messages: dict[str, Posted] = {}
        self.ephemeral: list[dict[str, Any]] = []
        stamps = itertools.count(1)

        def authorized(request: Recorded) -> bool:
            return request.headers.get("authorization") == f"Bearer {TOKEN}"

        def post_message(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            sent = request.json()
            ts = f"1712345710.{next(stamps):06d}"
            self.messages[ts] = Posted(sent["channel"], ts, sent.get("thread_ts"), sent["text"], sent.get("blocks"),
                                       history=[sent["text"]])
            return Answer(200, {"ok": True, "channel": sent["channel"], "ts": ts})

        def update(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            sent = request.json()
            posted = self.messages.get(sent["ts"])
            if posted is None or posted.channel != sent["channel"]:
                return Answer(200, {"ok": False, "error": "message_not_found"})
            posted.text, posted.edits = sent["text"], posted.edits + 1
            posted.blocks = sent.get("blocks", posted.blocks)
            posted.history.append(sent["text"])
            return Answer(200, {"ok": True, "channel": sent["channel"], "ts": sent["ts"]})

        def ephemeral(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            self.ephemeral.append(request.json())
            return Answer(200, {"ok": True, "message_ts": f"1712345799.{next(stamps):06d}"})

        def users_info(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            arguments = request.form() if request.body else request.query
            user = self.users.get(arguments.get("user", [""])[0])
            return Answer(200, {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"})

        self.route("POST", r"/api/chat\.postMessage", post_message)
        self.route("POST", r"/api/chat\.update", update)
        self.route("POST", r"/api/chat\.postEphemeral", ephemeral)
        self.route("GET", r"/api/users\.info", users_info)
        self.route("POST", r"/api/users\.info", users_info)

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    def in_thread(self, thread_ts: str) -> list[Posted]:
        """The bot's messages in a thread, oldest first."""
        return sorted((m for m in self.messages.values() if m.thread_ts == thread_ts), key=lambda m: m.ts)

    def cards(self, thread_ts: str) -> list[Posted]:
        return [m for m in self.in_thread(thread_ts) if m.blocks]

    def replies(self, thread_ts: str) -> list[str]:
        return [m.text for m in self.in_thread(thread_ts) if not m.blocks]

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == f"/api/{method}"]

    def reset(self) -> None:
        self.requests.clear()
        self.messages.clear()
        self.ephemeral.clear()


_ids = itertools.count(1)


def message_event(text: str, *, ts: str, thread_ts: str | None = None, user: str = ADA, kind: str = "app_mention",
                  event_id: str | None = None, user_team: str = TEAM, **extra: Any) -> dict[str, Any]:
    """An event_callback as Slack sends it; an app_mention mentions the bot."""
    event: dict[str, Any] = {"type": kind, "user": user, "ts": ts, "team": user_team, "channel": CHANNEL,
                             "event_ts": ts, "user_team": user_team,
                             "text": f"<@{BOT}> {text}" if kind == "app_mention" else text, **extra}
    if kind == "message":
        event.setdefault("channel_type", "channel")
    if thread_ts:
        event["thread_ts"] = thread_ts
    return {"token": "ZZZZZZWSxiZZZ2yIvs3peJ", "team_id": TEAM, "api_app_id": "A0MDYCDME", "event": event,
            "type": "event_callback", "event_id": event_id or f"Ev{next(_ids):08d}", "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM, "user_id": BOT, "is_bot": True}]}


def click(card: Posted, *, user: str, decision: str = "approve", user_team: str = TEAM, option: str = "") -> bytes:
    """The interactivity form body Slack sends when `user` presses a card's button."""
    return urlencode({"payload": json.dumps(click_payload(card, user=user, decision=decision,
                                                          user_team=user_team, option=option))}).encode()


def click_payload(card: Posted, *, user: str, decision: str = "approve", user_team: str = TEAM,
                  option: str = "") -> dict[str, Any]:
    """The block_actions payload of `user` pressing a card's button (Socket Mode sends it as is): Approve
    or Deny (`decision`), or a question's `option`."""
    actions = next(b for b in card.blocks if b["type"] == "actions")["elements"]
    button = next(a for a in actions if (a["text"]["text"] == option if option
                                         else a["action_id"] == f"approval_{decision}"))
    payload = {"type": "block_actions", "user": {"id": user, "team_id": user_team}, "team": {"id": TEAM},
               "trigger_id": f"{next(_ids)}.17653672481.{user}",
               "channel": {"id": card.channel},
               "container": {"type": "message", "message_ts": card.ts, "channel_id": card.channel,
                             "thread_ts": card.thread_ts},
               "message": {"ts": card.ts, "thread_ts": card.thread_ts},
               "response_url": "https://hooks.slack.com/actions/T061EG9R6/1/x",
               "actions": [{"action_id": button["action_id"], "value": button["value"], "type": "button"}]}
    return payload


def signed_headers(body: bytes, *, secret: str = SECRET, timestamp: int | None = None) -> dict[str, str]:
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature_for(secret, stamp, body)}
