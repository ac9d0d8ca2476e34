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
   Approve / Deny buttons, closed once decided, and the model's question a card
   with a button per option, closed once answered;
4. `/interactivity` takes a button click: an allowed approver resolves the
   call or answers the question (the turn resumes); anyone else is told so and
   the call stays parked. A reply in the thread by an allowed approver answers
   a waiting question too.

With `socket_mode=True` there are no routes: the server keeps one websocket to Slack open
per deployment (`socket_mode`), and each envelope goes to `take_event` or `take_click`, the
functions behind `/events` and `/interactivity`; the sender check and `send` happen before the
envelope is acknowledged (no three-second answer to protect), and `send` in the claim's transaction.

The events map is `replies`; the protocol, cards and client are `protocol`, `approvals`
and `client`. These modules are below `sessions`: the `req` and `ctx` they get are duck-typed
`ChannelContext`s, and their errors are recognized by their `code`.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Collection

from django.http import HttpResponse, JsonResponse

from agents.channels import POST, Channel, public_endpoint
from agents.errors import error_response
from agents.integrations.events import PayloadError, SignatureError
from agents.integrations.slack.approvals import (
    approver_allowed, may_decide, parse_approval_action, parse_interaction, unescaped,
)
from agents.integrations.slack.client import SlackChannelConfig, SlackConfig, check_sender, client_for
from agents.integrations.slack.protocol import (
    Engagement,
    SlackMessage,
    parse_body,
    parse_event,
    should_engage,
    url_verification_challenge,
    verify_request,
)
from agents.integrations.slack.replies import Replies
from agents.integrations.slack.socket_mode import EVENTS, INTERACTIVE, SocketModeLink

log = logging.getLogger(__name__)


def slack_channel(*, signing_secret_env: str = "SLACK_SIGNING_SECRET", bot_token_env: str = "SLACK_BOT_TOKEN",
                  api_url: str = "", engagement: str = "mentions", allow_external: bool = False,
                  allow_guests: bool = False, approvers: Collection[str] | None = None, streaming: bool = True,
                  stream_interval: float = 1.0, socket_mode: bool = False, app_token_env: str = "SLACK_APP_TOKEN",
                  description: str = "") -> Channel:
    """A channel answering a Slack app's events in threads (see the module docstring).

    `engagement`: "mentions" (mentions of the bot and direct messages) or
    "threads" (also every reply in a thread the bot already has a conversation in).
    `allow_external` / `allow_guests`: admit senders from other workspaces
    (Slack Connect) / guest accounts, blocked by default.
    `approvers`: who may decide approval cards (None: the thread's starter).
    `streaming`: edit one message as the reply streams, else post it once complete.
    `socket_mode`: take Slack's events over a websocket the server opens with the app-level token
    `app_token_env` names (agents.integrations.slack.socket_mode), not at the two request URLs.
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
                                stream_interval=float(stream_interval), socket_mode=bool(socket_mode),
                                app_token_env=app_token_env)
    replies = Replies(config)
    events = {
        "message.completed": replies.on_completed,
        "action.approval_requested": replies.on_approval_requested,
        "action.approval_resolved": replies.on_approval_resolved,
        "turn.failed": replies.on_turn_failed,
    }
    if streaming:
        events["message.appended"] = replies.on_delta
    routes = [
        POST("/events", raw=True, handler=functools.partial(receive_events, config),
             description="Slack Events API request URL (signed by Slack)"),
        POST("/interactivity", raw=True, handler=functools.partial(receive_interaction, config),
             description="Slack interactivity request URL: approval buttons (signed by Slack)"),
    ]
    return Channel(
        kind="slack",
        description=description or "A Slack app: mentions and threads become sessions, replies go to the thread.",
        routes=[] if socket_mode else routes,
        connection=functools.partial(SocketModeLink, config, take_envelope) if socket_mode else None,
        auth=[public_endpoint()],
        # Slack signs every request; a thread is one conversation whoever in it writes.
        shared_sessions=True,
        events=events,
        config=config,
    )


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
    return _ok(take_event(config, req, payload))


def take_event(config: SlackChannelConfig, ctx: Any, payload: dict[str, Any], *, at_once: bool = False) -> str:
    """An event Slack sent: dropped, a duplicate, or taken; what became of it ("ignored",
    "duplicate", "accepted").

    Over HTTP Slack waits three seconds, so the sender check and the turn are `receive_message`'s
    work, in the background. Over the socket (`at_once`) they happen here, before the envelope is
    acknowledged: the turn is queued in the same transaction as the claim, so an acknowledged event
    is never lost with the process that took it, and a late acknowledgement only brings a copy the
    claim turns away.
    """
    message = parse_event(payload)
    if message is None:
        return "ignored"
    in_thread = (config.engagement is Engagement.THREADS and message.in_thread
                 and ctx.has_continuation_session(message.continuation_key))
    if not should_engage(message, engagement=config.engagement, bot_in_thread=in_thread):
        return "ignored"
    if at_once and not _admitted(config, message):
        return "ignored"
    # The claim and what it starts commit together: a failure in between leaves the event
    # unclaimed, so Slack's retry is acted on; a retry of an event already claimed is answered
    # (acknowledged) and nothing more, which stops Slack retrying.
    with ctx.atomic():
        if message.event_id and not ctx.claim_delivery(f"slack-event:{message.event_id}"):
            return "duplicate"
        if at_once:
            _converse(config, ctx, message)
        else:
            ctx.wait_until(receive_message, dict(payload))
    return "accepted"


def take_envelope(config: SlackChannelConfig, ctx: Any, kind: str, payload: dict[str, Any]) -> str:
    """A Socket Mode envelope's payload, taken as its request URL would take it; what became of it."""
    if kind == EVENTS:
        return take_event(config, ctx, payload, at_once=True)
    if kind == INTERACTIVE:
        # A click comes again if its acknowledgement was late or lost: its trigger id is claimed with
        # the decision, so the copy neither decides twice nor tells the approver it was decided.
        click = payload.get("trigger_id")
        with ctx.atomic():
            if isinstance(click, str) and click and not ctx.claim_delivery(f"slack-click:{click}"):
                return "duplicate"
            refused = take_click(config, ctx, payload)
        return "taken" if refused is None else f"refused: {refused}"
    return "ignored"


def receive_message(ctx: Any, payload: dict[str, Any]) -> None:
    """The background part of `/events`: the sender check, then the thread's session gets the text."""
    message = parse_event(payload)
    if message is not None and _admitted(ctx.config, message):
        _converse(ctx.config, ctx, message)


def _admitted(config: SlackChannelConfig, message: SlackMessage) -> bool:
    """Whether the message is one to answer: it has text, and its sender passes the check (which
    may ask users.info, so it runs after answering Slack's request)."""
    if not message.text:
        log.info("slack: %s mentioned the bot with no text; nothing to do", message.user)
        return False
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
    return check.allowed


def _converse(config: SlackChannelConfig, ctx: Any, message: SlackMessage) -> None:
    """The thread's session gets the text, as the sender (coalesced behind a running turn); or, when
    the model's question waits in the thread and the sender may answer it, the text is its answer."""
    auth = slack_principal(message.user_team or message.team_id, message.user)
    if message.in_thread and _answered(config, ctx, message, auth):
        return
    ctx.send(message.text, continuation_token=message.continuation_key, admission="coalesce", auth=auth,
             state={"channel": message.channel, "thread_ts": message.conversation_ts, "team": message.team_id,
                    "starter": message.user, "reply": None, "approvals": {}})


def _answered(config: SlackChannelConfig, ctx: Any, message: SlackMessage, auth: dict[str, Any]) -> bool:
    """Answer the thread's oldest waiting question with the message, if one waits and the sender is
    one who decides in this thread (the approvers, else its starter)."""
    waiting = ctx.waiting_questions(message.continuation_key, auth=auth)
    if not waiting:
        return False
    first = waiting[0]
    state = ctx.state_of(first["sessionId"]).get()
    if not may_decide(message.user, message.user_team, _deciders(config, state), state.get("team") or message.team_id):
        return False
    try:
        ctx.answer_question(first["sessionId"], first["callId"], unescaped(message.text), auth=auth)
    except Exception as exc:  # answered meanwhile, or no answer (too long): the message goes as a message
        if getattr(exc, "code", "") in ("already_resolved", "approval_not_found", "invalid_answer"):
            return False
        raise
    return True


def _deciders(config: SlackChannelConfig, state: dict[str, Any]) -> tuple[str, ...]:
    """Who decides in a thread: the channel's `approvers`, else the thread's starter."""
    if config.approvers is not None:
        return tuple(config.approvers)
    return (state["starter"],) if state.get("starter") else ()


def receive_interaction(config: SlackChannelConfig, req: Any) -> HttpResponse:
    """An Approve / Deny click over HTTP."""
    refused = _unverified(req, config)
    if refused is not None:
        return refused
    try:
        text = take_click(config, req, parse_interaction(req.raw_body))
    except PayloadError as exc:
        return error_response(400, "invalid_payload", str(exc))
    if text is None:
        return HttpResponse(status=200)  # the card is closed by the approval_resolved event
    # Slack ignores the body of a block_actions answer: the clicker learns why from the ephemeral
    # message take_click posts after the answer.
    return JsonResponse({"response_type": "ephemeral", "replace_original": False, "text": text})


def take_click(config: SlackChannelConfig, ctx: Any, payload: dict[str, Any]) -> str | None:
    """An interaction Slack sent (over HTTP or Socket Mode). An Approve / Deny click by an allowed
    approver decides the call (None); anyone else is told why not, and the refusal is returned.
    A button whose value is not ours: PayloadError."""
    action = parse_approval_action(payload)
    if action is None:
        return None  # another kind of interaction: nothing of ours
    kind = "question" if action.decision == "answer" else "approval"

    def refuse(text: str) -> str:
        if action.channel and action.user_id:
            ctx.wait_until(tell_user, action.channel, action.user_id, text, action.thread_ts)
        return text

    try:
        state = ctx.state_of(action.session_id).get()
    except Exception as exc:  # ChannelError: not a session of this channel
        log.info("slack: a click on %s/%s: %s", action.session_id, action.call_id, exc)
        return refuse(f"This {kind} does not belong to a conversation of this app.")
    if state.get("channel") and action.channel and action.channel != state["channel"]:
        return refuse(f"This {kind} belongs to another conversation.")
    starter = state.get("starter")
    if not approver_allowed(action, _deciders(config, state), home_team_id=state.get("team") or None):
        who = f"<@{starter}>" if config.approvers is None and starter else "the approvers this app names"
        what = "answer this question" if kind == "question" else "decide on this call"
        return refuse(f"You cannot {what}: only {who} can. It is still waiting.")
    auth = slack_principal(action.user_team or action.team_id, action.user_id)
    try:
        if action.decision == "answer":
            ctx.answer_question(action.session_id, action.call_id, action.answer, auth=auth)
        else:
            ctx.resolve_approval(action.session_id, action.call_id, action.decision, auth=auth,
                                 reason="decided in Slack")
    except Exception as exc:
        if getattr(exc, "code", "") in ("already_resolved", "approval_not_found"):
            return refuse("This question was already answered." if kind == "question"
                          else "This call was already decided.")
        raise
    return None


def tell_user(ctx: Any, channel: str, user: str, text: str, thread_ts: str | None) -> None:
    """Background: an ephemeral message to one user (why a click was refused)."""
    client_for(ctx.config).post_ephemeral(channel, user, text, thread_ts=thread_ts)
