"""The Slack channel's events map: a turn's reply posted (or streamed) into the thread,
approval cards posted and closed, a failed turn said so."""
from __future__ import annotations

import json
import time
from typing import Any

from agents.integrations.slack.approvals import escape
from agents.integrations.slack.client import LazyClient, SlackChannelConfig, StreamedReply, client_for
from agents.integrations.slack.protocol import Engagement

# Slack shows about 4,000 characters of a message's text; a longer reply is cut there.
MESSAGE_LIMIT = 3900
# An approval card shows the call's input; the call runs with the whole of it.
SUMMARY_LIMIT = 1500


class Replies:
    """The events-map handlers: each gets (event, channel, ctx) for one session of the channel.

    Where the thread is (`channel`, `thread_ts`) and what has been posted so far
    (`reply`: the message being streamed; `approvals`: call id → card ts; `questions`: call id →
    the question asked) are in
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
        if data.get("kind") == "question":
            ts = client_for(self.config).post_question(where, thread_ts, session_id=ctx.session.id,
                                                       call_id=data["callId"], question=str(data.get("question", "")),
                                                       options=list(data.get("options") or []),
                                                       mention=self.config.engagement is not Engagement.THREADS)
            channel.state.modify(lambda s: {**s, "approvals": {**(s.get("approvals") or {}), data["callId"]: ts},
                                            "questions": {**(s.get("questions") or {}),
                                                          data["callId"]: str(data.get("question", ""))}})
            return
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
        by = decided_by.get("principalId", "")
        if data["decision"] == "answer":
            question = (state.get("questions") or {}).get(data["callId"], "")
            channel.state.modify(lambda s: {**s, "questions": {
                call: asked for call, asked in (s.get("questions") or {}).items() if call != data["callId"]}})
            client_for(self.config).close_question(where, ts, question=question, answer=str(data.get("answer", "")),
                                                   user_id=slack_user or "", by=by)
            return
        client_for(self.config).close_approval(where, ts, tool=data["toolName"], decision=data["decision"],
                                               user_id=slack_user or "", by=by)

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
