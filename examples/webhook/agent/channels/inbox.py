"""A webhook channel: a service posts {text, thread}; each thread is one durable session.

    POST /webhook/v1/channels/inbox/messages        {"text": "...", "thread": "t-1", "callbackUrl": "..."}
    GET  /webhook/v1/channels/inbox/threads/t-1     the thread's session and the replies so far

A thread belongs to the principal that opened it: the same thread name from another
caller (another person's token) is that caller's own thread, with its own session,
and reading it shows only that caller's replies. That is the channel's default
(`shared_sessions=False`, written out below); a channel whose callers are one shared
identity (a service signing each request, one fixed token) may share its threads.

Replies go back through the events map: each `message.completed` is stored in
the session's channel state and, when the thread gave a callback URL, posted to it
through `ctx.host.http`: the URL is the caller's choice, so a loopback, private or
metadata address (or a redirect to one) is refused unless AGENTSITE_OUTBOUND_ALLOW
names its network.
"""
from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field, HttpUrl

from agents.sdk import GET, POST, Channel, OutboundError

log = logging.getLogger(__name__)


class Incoming(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    text: str = Field(min_length=1, max_length=20_000, description="The message")
    thread: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$",
                        description="The conversation it belongs to")
    callback_url: HttpUrl | None = Field(default=None, alias="callbackUrl",
                                         description="Where replies of a new thread are posted")


class NoQuery(BaseModel):
    pass


def thread_key(thread: str) -> str:
    return f"thread:{thread}"


def receive_message(req):
    """Start or continue the thread's conversation."""
    body: Incoming = req.body
    handle = req.send(body.text, continuation_token=thread_key(body.thread), admission="coalesce",
                      title=f"thread {body.thread}",
                      state={"thread": body.thread, "replies": [],
                             "callbackUrl": str(body.callback_url) if body.callback_url else None})
    return {"thread": body.thread, "sessionId": handle.session_id, "created": handle.created,
            **req.session_urls(handle.session_id)}


def read_thread(req):
    """The thread's session and the replies delivered so far."""
    handle = req.find_continuation(thread_key(req.params["thread"]))
    if handle is None:
        return {"thread": req.params["thread"], "sessionId": None, "replies": []}
    state = handle.state.get()
    return {"thread": req.params["thread"], "sessionId": handle.session_id, "status": handle.status,
            "replies": state.get("replies", [])}


def deliver_reply(event, channel, ctx):
    """Runs after the reply is stored, outside the turn: keep it, then post it to the callback."""
    text = event["data"].get("text", "")
    state = channel.state.modify(lambda s: {**s, "replies": [*s.get("replies", []), text]})
    if state.get("callbackUrl"):
        try:
            with ctx.host.http as http:
                http.post(state["callbackUrl"], json={"thread": state.get("thread"), "text": text,
                                                      "sessionId": channel.session_id}, timeout=10)
        except OutboundError as exc:
            log.warning("cannot post the reply of %s to its callback: %s", channel.session_id, exc)


channel = Channel(
    description="Messages from a chat service, one session per thread.",
    routes=[
        POST("/messages", body=Incoming, handler=receive_message),
        GET("/threads/:thread", query=NoQuery, handler=read_thread),
    ],
    events={"message.completed": deliver_reply},
    state={"replies": []},
    # Callers are admitted by the server's chain, each as themself: their threads stay apart.
    shared_sessions=False,
)
