"""`list_agents`, `send_message` and `read_notifications`: offered to an agent that declares
`Agent(peers=[...])`, to every model provider alike (they are built-in tools).

The peers are an allowlist and fail closed: an agent not among them is never
listed and never reached. A refusal is raised, so the model sees it as the
call's error and can act on it.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from pydantic import BaseModel, Field

from agents.definitions import Tool
from agents.discovery import LoadedAgent
from agents.models import Agent
from sessions.messaging.delivery import send
from sessions.messaging.limits import MessageRefused
from sessions.host.providers import release_domains
from sessions.messaging.remote import send_remote
from sessions.models import AgentMessage

NAMES = ("list_agents", "send_message", "read_notifications")


class ListAgentsInput(BaseModel):
    pass


class SendMessageInput(BaseModel):
    to: str = Field(description="The agent's slug (or a remote agent's URL), as list_agents gives it")
    text: str = Field(min_length=1, description="The message, with everything the agent needs to act on it")
    thread: str | None = Field(default=None, max_length=200,
                               description="A name for a separate conversation with that agent: the same thread "
                                           "continues the same conversation (none: the default one)")


class ReadNotificationsInput(BaseModel):
    pass


def directory(peers: tuple[str, ...]) -> list[dict[str, Any]]:
    """The peers as the model sees them, in the order declared; one not on this server is listed as not deployed."""
    found = {a.slug: a for a in Agent.objects.filter(slug__in=peers)}
    listed = []
    for slug in peers:
        agent = found.get(slug)
        listed.append({"slug": slug, "name": (agent.name if agent else "") or slug,
                       "description": agent.description if agent else "",
                       "deployed": bool(agent and agent.active_deployment_id)})
    return listed


def notification(row: AgentMessage) -> dict[str, Any]:
    return {"id": row.id, "kind": row.kind, "from": {"agent": row.sender_agent, "sessionId": row.sender_id},
            "thread": row.thread or None, "text": row.text, "at": row.created_at.isoformat()}


def remote_directory(remote: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    return [{"slug": url, "name": url, "description": "an agent on another A2A server: its reply is the result "
             "of send_message", "deployed": True, "remote": True} for url in remote]


def messaging_tools(loaded: LoadedAgent) -> dict[str, Tool]:
    """The three tools bound to this agent's peers; none without peers."""
    if not loaded.peers and not loaded.remote_peers:
        return {}
    peers = tuple(loaded.peers)
    remote = {peer["url"]: peer for peer in loaded.remote_peers}

    def list_agents(input: ListAgentsInput, ctx) -> dict[str, Any]:
        return {"agents": directory(peers) + remote_directory(remote)}

    def send_message(input: SendMessageInput, ctx) -> dict[str, Any]:
        if input.to not in peers and input.to.rstrip("/") not in remote:
            raise MessageRefused(f"not reachable: {input.to!r} is not an agent this one may message; "
                                 f"it may message: {', '.join([*peers, *remote])}")
        session = ctx.host.session if ctx.host is not None else None
        if session is None or not ctx.host.turn_id:  # the turn is what the loop guards count from
            raise MessageRefused("send_message needs a session's turn to send from")
        if len(input.text) > settings.AGENTSITE_MAX_MESSAGE_CHARS:  # what a person's message may be, no more
            raise MessageRefused(f"too long: a message is at most {settings.AGENTSITE_MAX_MESSAGE_CHARS} characters "
                                 f"({len(input.text)} given); send less")
        if input.to.rstrip("/") in remote:
            return send_remote(session, loaded.slug, ctx.host.turn_id, remote[input.to.rstrip("/")], input.text,
                               input.thread or "", domains=release_domains(ctx.host.agent, session))
        delivered = send(session, loaded.slug, ctx.host.turn_id, input.to, input.text, input.thread or "")
        return {"delivered": True, "sessionId": delivered.session_id, "thread": input.thread}

    def read_notifications(input: ReadNotificationsInput, ctx) -> dict[str, Any]:
        session = ctx.host.session if ctx.host is not None else None
        if session is None:
            raise MessageRefused("read_notifications needs a session to read for")
        return {"notifications": [notification(row) for row in AgentMessage.take_unread(session.id)]}

    roster = ", ".join([*peers, *remote])
    sending = (f"Send a message to another agent ({roster}). It arrives in that agent's conversation for the "
               "thread and is answered there: collect the answer later with read_notifications.")
    if remote:
        sending += " An agent on another server (by URL) answers in the result."
    return {
        "list_agents": Tool(f"List the agents you may message ({roster}): slug, name, description, and whether "
                            "each is deployed.", ListAgentsInput, list_agents),
        "send_message": Tool(sending, SendMessageInput, send_message, effect="write"),
        "read_notifications": Tool("Read the replies other agents sent to this conversation since you last "
                                   "read; each is returned once.", ReadNotificationsInput, read_notifications),
    }
