"""A message from one agent's session into another agent's conversation.

A message becomes a turn of the recipient's session (trigger `agent`, its
`origin` naming the sender), queued behind a running turn (`coalesce`), so it
is never lost and never cuts a turn short. Which session receives it:

- the session that opened the sender's, when the sender's session was opened
  by a message from the target agent: the answer goes back into that
  conversation;
- else the target's session for (sending session, target, thread): a
  continuation key on the `agent` channel, created on first use and owned by
  the sending session's principal, so its owner and operators see it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from agents.discovery import load_deployment
from agents.models import Agent
from sessions.turn.admission import AdmissionError, start_session, submit_message
from sessions.turn.locks import message_locks
from sessions.messaging.limits import (
    MessageRefused, check_budget, check_hops, check_rate, check_sent, next_hops, root_of,
)
from sessions.models import AgentMessage, Session, Turn
from sessions.principal import Principal

CHANNEL = "agent"


@dataclass(frozen=True)
class Delivered:
    session_id: str
    message_id: str
    created: bool


def conversation_key(sender_id: str, target: str, thread: str) -> str:
    """The continuation key's hash of the target's session for (sending session, target, thread)."""
    return hashlib.sha256("\0".join((CHANNEL, sender_id, target, thread)).encode()).hexdigest()


def send(sender: Session, sender_agent: str, turn_id: str, target_slug: str, text: str,
         thread: str = "") -> Delivered:
    """Deliver `text` from the sending session's turn `turn_id` to agent `target_slug`.

    1. the target must be deployed, and the message within the hop limit;
    2. the recipient session: the opener of the sender's (the reply path), else the keyed one;
    3. in one transaction: the root's turn budget, the conversation's rate, the turn queued (or
       the session started) and the AgentMessage row.
    Raises MessageRefused with what the model should know.
    """
    if not turn_id:  # the root of every turn-less send would be the same: one budget for the server
        raise MessageRefused("send_message needs a session's turn to send from")
    target = Agent.objects.filter(slug=target_slug).select_related("active_deployment").first()
    if target is None or target.active_deployment is None:
        raise MessageRefused(f"not deployed: agent {target_slug!r} has no active deployment")
    trigger, sending = Turn.objects.filter(pk=turn_id).values_list("trigger", "origin").first() or (None, None)
    hops = next_hops(sending)
    check_hops(hops)
    root = root_of(turn_id, trigger, sending)
    origin = {"agent": sender_agent, "sessionId": sender.id, "turnId": turn_id, "hops": hops, "root": root}
    if thread:
        origin["thread"] = thread
    key = conversation_key(sender.id, target.slug, thread)
    recipient = opener(sender, target) or keyed(target, key)
    # Admission loads the release: do it now, not under the write lock of the transaction below.
    load_deployment(target.active_deployment)
    created = False
    with transaction.atomic():
        # First in the transaction, before admission's locks (the order: sessions.turn.locks).
        message_locks(root, sender.id, recipient.id if recipient is not None else None)
        check_budget(root, sender_agent, target.slug)
        check_sent(sender.id)
        if recipient is not None:
            check_rate(sender.id, recipient.id)
        else:
            try:
                with transaction.atomic():
                    admitted = start_session(target, owner_of(sender), text, channel=CHANNEL, channel_key_hash=key,
                                             trigger=Turn.Trigger.AGENT, origin=origin)
                created = True
            except IntegrityError:  # a concurrent send opened the key's session first: follow it up
                recipient = keyed(target, key)
                if recipient is None:
                    raise
        if not created:
            try:
                admitted = submit_message(recipient, text, admission=Turn.Admission.COALESCE,
                                          trigger=Turn.Trigger.AGENT, origin=origin)
            except AdmissionError as exc:
                raise MessageRefused(f"not delivered: {exc.message}") from exc
        row = AgentMessage.objects.create(kind=AgentMessage.Kind.MESSAGE, sender=sender, sender_agent=sender_agent,
                                          recipient=admitted.session, thread=thread, text=text, hops=hops,
                                          root=root, turn=admitted.turn)
    return Delivered(session_id=admitted.session.id, message_id=row.id, created=created)


def owner_of(session: Session) -> Principal:
    """The sending session's principal: sessions an agent opens on another are its owner's."""
    return Principal(authenticator=session.authenticator, principal_id=session.principal_id,
                     principal_type=session.principal_type)


def opener(sender: Session, target: Agent) -> Session | None:
    """The target's session whose message opened the sender's session, if one did."""
    if sender.channel != CHANNEL:
        return None
    first = Turn.objects.filter(session_id=sender.id).order_by("created_at", "id").values_list("origin", flat=True)
    origin = first.first() or {}
    if origin.get("agent") != target.slug or not origin.get("sessionId"):
        return None
    return Session.objects.filter(pk=origin["sessionId"], agent=target).select_related("agent", "deployment").first()


def keyed(target: Agent, key: str) -> Session | None:
    return (Session.objects.filter(agent=target, channel=CHANNEL, channel_key_hash=key)
            .select_related("agent", "deployment").first())
