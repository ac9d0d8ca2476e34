"""What the engine records for a turn that another agent's message started.

Its `message.received` names the sender (`source: "agent"`, the sender's
`agent` and `sessionId`), and when it completes its final reply waits in the
sending session's notifications (an AgentMessage of kind reply; a turn that
failed or was interrupted replies why it has none) until that
session's `read_notifications` takes it. Other turns pay nothing: the engine
calls in here only for turns whose trigger is `agent` (`register`).
"""
from __future__ import annotations

from typing import Any

from sessions.messaging.tools import messaging_tools
from sessions.models import AgentMessage, Session, Turn
from sessions.turn import extensions


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


def record_reply(turn: Turn, agent_slug: str, messages: list[dict[str, Any]], status: str = Turn.Status.COMPLETED,
                 error: str = "") -> None:
    """The reply to the sending session, in the transaction that settles the turn.

    A turn that failed or was interrupted replies why it has no answer, so a sender is never
    left waiting on a message that was delivered. Nothing when the sender's session is gone
    (its row would fail the foreign key at commit, and the turn's end with it) or a completed
    turn said nothing.
    """
    origin = turn.origin or {}
    if status == Turn.Status.COMPLETED:
        text = final_reply(messages)
    else:
        text = f"[no answer: {agent_slug}'s turn {status}: {error or 'it ended early'}]"
    sender_id = origin.get("sessionId")
    if not text or not sender_id or not Session.objects.filter(pk=sender_id).exists():
        return
    AgentMessage.objects.create(kind=AgentMessage.Kind.REPLY, sender_id=turn.session_id, sender_agent=agent_slug,
                                recipient_id=sender_id, thread=origin.get("thread", ""), text=text,
                                hops=int(origin.get("hops") or 1), turn_id=turn.id)


def received(turn: Turn) -> dict[str, Any]:
    return received_from(turn.origin or {})


def register() -> None:
    """What messages between agents add to a turn (sessions.apps): the `agent` trigger's sender and
    reply, and the built-ins list_agents, send_message and read_notifications."""
    extensions.add_trigger(Turn.Trigger.AGENT, extensions.Trigger(received=received, answered=record_reply))
    extensions.add_builtin_tools("messaging", messaging_tools)
