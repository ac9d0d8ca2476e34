"""The loop guards of agents messaging each other.

Two agents told to keep talking would otherwise run turns (and spend on a
model) forever. `AGENTSITE_AGENT_HOP_LIMIT`: how many messages may pass
between agents in a row since a person or a trigger last spoke (a turn they
started has 0 hops; a message sent from a turn carries its hops + 1).
`AGENTSITE_AGENT_TURN_BUDGET`: how many turns agents' messages may start in
all from one turn a person or a trigger started (its root), across every
session and thread they fan into; each message starts one turn, and carries
its root, so the count is of the root's AgentMessage rows, made one after
another under a lock on the root (the depth bound alone lets a tree of
threads grow to the hop limit's power). A reminder set from a turn that
descends from agents' messages carries that turn's root and hops too
(`descent`), and so does every turn it wakes: agents cannot mint a fresh
budget by waking themselves later. A person's own turn, and a reminder it
set, start fresh ones.
`AGENTSITE_AGENT_MESSAGE_RATE`: how many messages (and replies) one
conversation, a pair of sessions in both directions, may carry per window,
counted from the AgentMessage rows; the same count bounds the messages one
session sends in a window to all agents together, so a turn cannot fan out
through a new thread (a new conversation) on every call.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from sessions.models import AgentMessage, Turn

log = logging.getLogger(__name__)


class MessageRefused(Exception):
    """A message the tool does not send; the model sees why as the call's error."""


def next_hops(origin: dict[str, Any] | None) -> int:
    """The hops of a message sent from a turn with this origin."""
    return int((origin or {}).get("hops") or 0) + 1


def root_of(turn_id: str, trigger: str | None, origin: dict[str, Any] | None) -> str:
    """The turn a person or a trigger started that turn `turn_id` descends from: itself, unless
    another agent's message started it, or a reminder set in such a turn woke it (then the root
    that message or reminder carried)."""
    origin = origin or {}
    if trigger != Turn.Trigger.AGENT:
        return str(origin.get("root") or turn_id)
    # A message from before roots were carried: its sending turn is the nearest root known.
    return str(origin.get("root") or origin.get("turnId") or turn_id)


def descent(turn_id: str) -> dict[str, Any] | None:
    """What a reminder set in turn `turn_id` carries into the turns it wakes: the turn, its root
    and its hops, when the turn descends from agents' messages; None when a person or a trigger
    started it (their reminders start budgets of their own, as their messages do)."""
    if not turn_id:
        return None
    trigger, origin = Turn.objects.filter(pk=turn_id).values_list("trigger", "origin").first() or (None, None)
    if trigger is None:
        return None
    root = root_of(turn_id, trigger, origin)
    if root == turn_id:
        return None
    return {"turnId": turn_id, "root": root, "hops": int((origin or {}).get("hops") or 0)}


def check_budget(root: str, sender_agent: str, target: str) -> None:
    """Refuse once the root's messages (each a turn of an agent) reached the budget.

    Under the root's lock (`sessions.turn.locks.message_locks`)."""
    budget = settings.AGENTSITE_AGENT_TURN_BUDGET
    spent = AgentMessage.objects.filter(root=root, kind=AgentMessage.Kind.MESSAGE).count()
    if spent < budget:
        return
    log.warning("agent turn budget spent: turn %s has caused %d turns of agents (AGENTSITE_AGENT_TURN_BUDGET=%d); "
                "refused %s's message to %s", root, spent, budget, sender_agent, target)
    raise MessageRefused(
        f"turn budget: the message that started this work has already caused {spent} turns of agents, and at most "
        f"{budget} may follow from one (AGENTSITE_AGENT_TURN_BUDGET); answer with what you have")


def check_hops(hops: int) -> None:
    limit = settings.AGENTSITE_AGENT_HOP_LIMIT
    if hops > limit:
        raise MessageRefused(
            f"hop limit: this would be message {hops} between agents in a row, and at most {limit} may pass "
            "(AGENTSITE_AGENT_HOP_LIMIT) before a person or a trigger speaks again; answer with what you have")


def check_rate(session_id: str, other_id: str) -> None:
    """Refuse once the conversation between the two sessions carried the rate's count in its window."""
    rate = settings.AGENTSITE_AGENT_MESSAGE_RATE
    if rate is None:
        return
    since = timezone.now() - timedelta(seconds=rate.seconds)
    between = Q(sender_id=session_id, recipient_id=other_id) | Q(sender_id=other_id, recipient_id=session_id)
    if AgentMessage.objects.filter(between, created_at__gte=since).count() >= rate.count:
        raise MessageRefused(
            f"rate limit: this conversation carried {rate.count} messages in the last {rate.seconds} s "
            f"(AGENTSITE_AGENT_MESSAGE_RATE={rate}); wait before sending more")


def check_sent(session_id: str) -> None:
    """Refuse once the session sent the rate's count of messages in its window, to whichever sessions."""
    rate = settings.AGENTSITE_AGENT_MESSAGE_RATE
    if rate is None:
        return
    since = timezone.now() - timedelta(seconds=rate.seconds)
    sent = AgentMessage.objects.filter(sender_id=session_id, kind=AgentMessage.Kind.MESSAGE, created_at__gte=since)
    if sent.count() >= rate.count:
        raise MessageRefused(
            f"rate limit: this session sent {rate.count} messages in the last {rate.seconds} s "
            f"(AGENTSITE_AGENT_MESSAGE_RATE={rate}), to new conversations included; wait before sending more")
