"""`slack_channel(...)`: a Slack app's Events API and interactivity endpoints as a channel.

    # agent/channels/slack.py
    from agents.sdk import slack_channel
    channel = slack_channel(engagement="threads", approvers=["U061F7AUR"])

serves `POST /<slug>/v1/channels/slack/events` (the app's Event Subscriptions
request URL) and `POST /<slug>/v1/channels/slack/interactivity` (its
Interactivity request URL). Each Slack thread is one session, keyed
`<channel>:<thread_ts>`; replies go back into the thread through the events map.

The path of a message:

1. `/events` checks the signature over the raw bytes (a bad, old or replayed
   one is a 401), answers Slack's URL check, drops what the bot does not
   engage with, claims Slack's `event_id` (a retry of a claimed one is
   answered 200 and nothing more) and hands the event to `receive_message`
   with `wait_until`, all within Slack's three seconds;
2. `receive_message`, a django-q2 task, checks the sender (users.info, which
   may be slow) and `send`s the text to the thread's session (coalesced behind
   a running turn) as the principal `slack:<team>:<user>`;
3. the events map posts the reply in the thread: streamed into one message
   (posted on the first text, edited no more often than `stream_interval`) or
   posted once when complete; an approval-gated tool call becomes a card with
   Approve / Deny buttons, closed once decided;
4. `/interactivity` takes a button click: an allowed approver resolves the
   call (the turn resumes); anyone else is told so and the call stays parked.

This module is below `sessions`: the `req` and `ctx` it gets are duck-typed
`ChannelContext`s, and their errors are recognized by their `code`.
"""
from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Collection

from django.http import HttpResponse, JsonResponse

from agents.channels import POST, Channel, public_endpoint
from agents.errors import error_response

from .events import PayloadError, SignatureError
from .slack import (
    Engagement,
    SlackClient,
    SlackConfig,
    StreamedReply,
    approver_allowed,
    check_sender,
    escape,
    parse_approval_action,
    parse_body,
    parse_event,
    parse_interaction,
    should_engage,
    url_verification_challenge,
    verify_request,
)

log = logging.getLogger(__name__)

# Slack shows about 4,000 characters of a message's text; a longer reply is cut there.
MESSAGE_LIMIT = 3900
# An approval card shows the call's input; the call runs with the whole of it.
SUMMARY_LIMIT = 1500


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


def slack_channel(*, signing_secret_env: str = "SLACK_SIGNING_SECRET", bot_token_env: str = "SLACK_BOT_TOKEN",
                  api_url: str = "", engagement: str = "mentions", allow_external: bool = False,
                  allow_guests: bool = False, approvers: Collection[str] | None = None, streaming: bool = True,
                  stream_interval: float = 1.0, description: str = "") -> Channel:
    """A channel answering a Slack app's events in threads (see the module docstring).

    `engagement`: "mentions" (mentions of the bot and direct messages) or
    "threads" (also every reply in a thread the bot already has a conversation in).
    `allow_external` / `allow_guests`: admit senders from other workspaces
    (Slack Connect) / guest accounts, blocked by default.
    `approvers`: who may decide approval cards (None: the thread's starter).
    `streaming`: edit one message as the reply streams, else post it once complete.
    """
    try:
        engaged = Engagement(engagement)
    except ValueError:
        raise ValueError(f"slack_channel(engagement={engagement!r}): use 'mentions' or 'threads'") from None
    if isinstance(approvers, str) or (approvers is not None and not all(
            isinstance(a, str) and a for a in approvers)):
        raise ValueError("slack_channel(approvers=...) takes a list of Slack user ids (or ['*']), not a string")
    if not isinstance(stream_interval, (int, float)) or stream_interval <= 0:
        raise ValueError("slack_channel(stream_interval=...) is a number of seconds above 0")
    config = SlackChannelConfig(signing_secret_env=signing_secret_env, bot_token_env=bot_token_env, api_url=api_url,
                                engagement=engaged, allow_external=allow_external, allow_guests=allow_guests,
                                approvers=None if approvers is None else tuple(approvers), streaming=streaming,
                                stream_interval=float(stream_interval))
    replies = Replies(config)
    events = {
        "message.completed": replies.on_completed,
        "action.approval_requested": replies.on_approval_requested,
        "action.approval_resolved": replies.on_approval_resolved,
        "turn.failed": replies.on_turn_failed,
    }
    if streaming:
        events["message.appended"] = replies.on_delta
    return Channel(
        kind="slack",
        description=description or "A Slack app: mentions and threads become sessions, replies go to the thread.",
        routes=[
            POST("/events", raw=True, handler=functools.partial(receive_events, config),
                 description="Slack Events API request URL (signed by Slack)"),
            POST("/interactivity", raw=True, handler=functools.partial(receive_interaction, config),
                 description="Slack interactivity request URL: approval buttons (signed by Slack)"),
        ],
        auth=[public_endpoint()],
        events=events,
        config=config,
    )


# -- answers -------------------------------------------------------------------------------

def _ok(outcome: str) -> JsonResponse:
    # Slack reads only the status; the outcome is for whoever replays a delivery by hand.
    return JsonResponse({"ok": True, "outcome": outcome})


def _unverified(req: Any, config: SlackConfig) -> JsonResponse | None:
    """The 401 for a request not proven to come from Slack, or None.

    Without a signing secret nothing can be proven, so only a loopback caller of a
    `serve --dev` server is taken (to replay recorded events by hand).
    """
    secret = config.signing_secret()
    if not secret:
        if req.dev_loopback:
            return None
        return error_response(401, "slack_not_configured",
                      f"no Slack signing secret: set {config.signing_secret_env} (unsigned requests are taken "
                      "only from a loopback caller of a server started with --dev)")
    try:
        verify_request(secret, req.headers, req.raw_body)
    except SignatureError as exc:
        return error_response(401, "invalid_signature", str(exc))
    return None


def slack_principal(team: str, user: str) -> dict[str, Any]:
    """Who a Slack user is to sessions: `slack:<team>:<user>`."""
    return {"principal_id": f"slack:{team}:{user}", "authenticator": "slack", "principal_type": "user",
            "attributes": {"team": team, "user": user}}


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


# -- /events ---------------------------------------------------------------------------------

def receive_events(config: SlackChannelConfig, req: Any) -> HttpResponse:
    """An Events API delivery: verified, then acted on in the background (Slack waits three seconds)."""
    refused = _unverified(req, config)
    if refused is not None:
        return refused
    try:
        payload = parse_body(req.raw_body)
    except PayloadError as exc:
        return error_response(400, "invalid_payload", str(exc))
    challenge = url_verification_challenge(payload)
    if challenge is not None:
        return JsonResponse({"challenge": challenge})
    message = parse_event(payload)
    if message is None:
        return _ok("ignored")
    in_thread = (config.engagement is Engagement.THREADS and message.in_thread
                 and req.has_continuation_session(message.continuation_key))
    if not should_engage(message, engagement=config.engagement, bot_in_thread=in_thread):
        return _ok("ignored")
    # The claim and the background task commit together: a failure in between leaves the
    # event unclaimed, so Slack's retry (X-Slack-Retry-Num) is acted on; a retry of an
    # event already claimed is answered 200, which stops Slack retrying.
    with req.atomic():
        if message.event_id and not req.claim_delivery(f"slack-event:{message.event_id}"):
            return _ok("duplicate")
        req.wait_until(receive_message, dict(payload))
    return _ok("accepted")


def receive_message(ctx: Any, payload: dict[str, Any]) -> None:
    """The background part of `/events`: the sender check, then the thread's session gets the text."""
    config = ctx.config
    message = parse_event(payload)
    if message is None:
        return
    if not message.text:
        log.info("slack: %s mentioned the bot with no text; nothing to do", message.user)
        return
    try:
        client = client_for(config)
    except LookupError as exc:
        log.warning("slack: %s; the sender cannot be checked, so the message is dropped", exc)
        client = None
    check = check_sender(message, client=client, allow_external=config.allow_external,
                         allow_guests=config.allow_guests)
    if not check.allowed:
        log.info("slack: message %s from %s not taken: %s", message.event_id or message.ts, message.user,
                 check.reason)
        return
    ctx.send(message.text, continuation_token=message.continuation_key, admission="coalesce",
             auth=slack_principal(message.user_team or message.team_id, message.user),
             state={"channel": message.channel, "thread_ts": message.conversation_ts, "team": message.team_id,
                    "starter": message.user, "reply": None, "approvals": {}})


# -- /interactivity ---------------------------------------------------------------------

def receive_interaction(config: SlackChannelConfig, req: Any) -> HttpResponse:
    """An Approve / Deny click. Only an allowed approver decides; anyone else is told why not."""
    refused = _unverified(req, config)
    if refused is not None:
        return refused
    try:
        action = parse_approval_action(parse_interaction(req.raw_body))
    except PayloadError as exc:
        return error_response(400, "invalid_payload", str(exc))
    if action is None:
        return HttpResponse(status=200)  # another kind of interaction: nothing of ours

    def refuse(text: str) -> HttpResponse:
        # Slack ignores the body of a block_actions answer: the clicker learns why from an
        # ephemeral message, posted after the answer.
        if action.channel and action.user_id:
            req.wait_until(tell_user, action.channel, action.user_id, text, action.thread_ts)
        return JsonResponse({"response_type": "ephemeral", "replace_original": False, "text": text})

    try:
        state = req.state_of(action.session_id).get()
    except Exception as exc:  # ChannelError: not a session of this channel
        log.info("slack: a click on %s/%s: %s", action.session_id, action.call_id, exc)
        return refuse("This approval does not belong to a conversation of this app.")
    if state.get("channel") and action.channel and action.channel != state["channel"]:
        return refuse("This approval belongs to another conversation.")
    starter = state.get("starter")
    allowed = config.approvers if config.approvers is not None else ((starter,) if starter else ())
    if not approver_allowed(action, allowed, home_team_id=state.get("team") or None):
        who = f"<@{starter}>" if config.approvers is None and starter else "the approvers this app names"
        return refuse(f"You cannot decide on this call: only {who} can. It is still waiting.")
    try:
        req.resolve_approval(action.session_id, action.call_id, action.decision,
                             auth=slack_principal(action.user_team or action.team_id, action.user_id),
                             reason="decided in Slack")
    except Exception as exc:
        if getattr(exc, "code", "") in ("already_resolved", "approval_not_found"):
            return refuse("This call was already decided.")
        raise
    return HttpResponse(status=200)  # the card is closed by the approval_resolved event


def tell_user(ctx: Any, channel: str, user: str, text: str, thread_ts: str | None) -> None:
    """Background: an ephemeral message to one user (why a click was refused)."""
    client_for(ctx.config).post_ephemeral(channel, user, text, thread_ts=thread_ts)


# -- replies (the events map) ---------------------------------------------------------------

class Replies:
    """The events-map handlers: each gets (event, channel, ctx) for one session of the channel.

    Where the thread is (`channel`, `thread_ts`) and what has been posted so far
    (`reply`: the message being streamed; `approvals`: call id → card ts) are in
    the session's channel state, so any worker can pick up the next event.
    """

    def __init__(self, config: SlackChannelConfig):
        self.config = config

    def _thread(self, channel: Any) -> tuple[dict[str, Any], str, str] | None:
        state = channel.state.get()
        if not state.get("channel") or not state.get("thread_ts"):
            return None
        return state, state["channel"], state["thread_ts"]

    def on_delta(self, event: dict[str, Any], channel: Any, ctx: Any) -> None:
        found = self._thread(channel)
        if found is None:
            return
        state, where, thread_ts = found
        reply = state.get("reply") or {}
        text = reply.get("text", "") + (event["data"].get("delta") or "")
        # Built on demand: most deltas only grow the stored text (chat.update is rate limited).
        streamed = StreamedReply(LazyClient(self.config), where, thread_ts, interval=self.config.stream_interval,
                                 clock=time.time, ts=reply.get("ts"), sent=reply.get("sent", ""),
                                 last_update=reply.get("last_update", 0.0))
        streamed.update(_shown(text))
        channel.state.update({"reply": {"text": text, **streamed.snapshot()}})

    def on_completed(self, event: dict[str, Any], channel: Any, ctx: Any) -> None:
        found = self._thread(channel)
        text = event["data"].get("text") or ""
        if found is None or not text:
            return
        state, where, thread_ts = found
        reply = state.get("reply") or {}
        streamed = StreamedReply(client_for(self.config), where, thread_ts, clock=time.time, ts=reply.get("ts"),
                                 sent=reply.get("sent", ""), last_update=reply.get("last_update", 0.0))
        streamed.finish(_shown(text))
        channel.state.update({"reply": None})  # the next step's text is a new message

    def on_approval_requested(self, event: dict[str, Any], channel: Any, ctx: Any) -> None:
        found = self._thread(channel)
        if found is None:
            return
        _, where, thread_ts = found
        data = event["data"]
        summary = json.dumps(data.get("input"), indent=2, ensure_ascii=False)
        if len(summary) > SUMMARY_LIMIT:
            summary = summary[: SUMMARY_LIMIT - 1] + "…"
        ts = client_for(self.config).post_approval(where, thread_ts, session_id=ctx.session.id,
                                                   call_id=data["callId"], tool=data["toolName"], summary=summary)
        channel.state.modify(lambda s: {**s, "approvals": {**(s.get("approvals") or {}), data["callId"]: ts}})

    def on_approval_resolved(self, event: dict[str, Any], channel: Any, ctx: Any) -> None:
        found = self._thread(channel)
        if found is None:
            return
        state, where, _ = found
        data = event["data"]
        ts = (state.get("approvals") or {}).get(data["callId"])
        if not ts:
            return
        decided_by = data.get("decidedBy") or {}
        slack_user = (decided_by.get("attributes") or {}).get("user") \
            if decided_by.get("authenticator") == "slack" else ""
        client_for(self.config).close_approval(where, ts, tool=data["toolName"], decision=data["decision"],
                                               user_id=slack_user or "", by=decided_by.get("principalId", ""))

    def on_turn_failed(self, event: dict[str, Any], channel: Any, ctx: Any) -> None:
        found = self._thread(channel)
        if found is None:
            return
        _, where, thread_ts = found
        error = str(event["data"].get("error") or "unknown error")[:300]
        client_for(self.config).post_message(where, f"I could not finish that: {escape(error)}", thread_ts=thread_ts)
        channel.state.update({"reply": None})


def _shown(text: str) -> str:
    """A reply as Slack gets it: control characters escaped (no stray mentions or links), cut to fit."""
    shown = escape(text)
    return shown if len(shown) <= MESSAGE_LIMIT else shown[: MESSAGE_LIMIT - 1] + "…"


class LazyClient:
    """A SlackClient built on first use (most streamed deltas make no request)."""

    def __init__(self, config: SlackConfig):
        self.config = config

    def __getattr__(self, name: str) -> Any:
        return getattr(client_for(self.config), name)
