"""What the engine records for a turn that another agent's message started.

Its `message.received` names the sender (`source: "agent"`, the sender's
`agent` and `sessionId`), and when it completes its final reply waits in the
sending session's notifications (an AgentMessage of kind reply) until that
session's `read_notifications` takes it. Other turns pay nothing: the engine
calls in here only for turns whose trigger is `agent`.
"""
from __future__ import annotations

from typing import Any

from sessions.models import AgentMessage, Session, Turn


def received_from(origin: dict[str, Any]) -> dict[str, Any]:
    """The sender's fields of a `message.received` event."""
    sender = {"agent": origin.get("agent", ""), "sessionId": origin.get("sessionId", "")}
    if origin.get("thread"):
        sender["thread"] = origin["thread"]
    return sender


def final_reply(messages: list[dict[str, Any]]) -> str:
    """The text of the turn's last step (a completed turn ends on a reply without tool calls)."""
    last = messages[-1] if messages else {}
    content = last.get("content") if last.get("role") == "assistant" else None
    return content if isinstance(content, str) else ""


def record_reply(turn: Turn, agent_slug: str, messages: list[dict[str, Any]]) -> None:
    """The reply to the sending session, in the transaction that settles the turn.

    Nothing when the sender's session is gone (its row would fail the foreign key at commit,
    and the turn's end with it) or the turn said nothing.
    """
    origin = turn.origin or {}
    text = final_reply(messages)
    sender_id = origin.get("sessionId")
    if not text or not sender_id or not Session.objects.filter(pk=sender_id).exists():
        return
    AgentMessage.objects.create(kind=AgentMessage.Kind.REPLY, sender_id=turn.session_id, sender_agent=agent_slug,
                                recipient_id=sender_id, thread=origin.get("thread", ""), text=text,
                                hops=int(origin.get("hops") or 1), turn_id=turn.id)
