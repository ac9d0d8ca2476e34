"""Handing stored events to the custom channels that own their sessions.

Called by the event path (`sessions.eventlog.events.run_hooks`) after a batch commits.
It only decides whether the session belongs to a channel whose events map
wants one of the batch's types, and if so enqueues one django-q2 task
(`sessions.custom_channels.deliver_channel_events`) for the session: the
channel's handlers (which may post to a chat service) never run on the
turn's path, and a failing or slow one never touches the turn.

What is delivered is decided by the task from the session's `channel_cursor`,
not by this batch, so a lost enqueue (a crash between commit and enqueue) is
made good by the session's next delivery.
"""
from __future__ import annotations

import functools
import logging
from typing import Sequence

from agents.channels import ChannelHook
from sessions.models import Session
from sessions.plumbing.taskqueue import enqueue

log = logging.getLogger(__name__)

DELIVER_TASK = "sessions.custom_channels.deliver_channel_events"


@functools.lru_cache(maxsize=4096)
def _channel_of(session_id: str) -> str | None:
    """A session's channel never changes: one query per session and process."""
    return Session.objects.filter(pk=session_id).values_list("channel", flat=True).first()


def hand_to_channels(hooks: Sequence[ChannelHook], session_id: str, types: Sequence[str]) -> None:
    """Enqueue a delivery if the session's channel subscribes to one of `types`. Never raises."""
    try:
        channel = _channel_of(session_id)
        if channel is None:
            _channel_of.cache_clear()  # a session deleted and nothing to deliver: do not keep the miss
            return
        if not any(h.channel_id == channel and any(h.wants(t) for t in types) for h in hooks):
            return
        enqueue_delivery(session_id)
    except Exception:
        log.exception("cannot hand the events of %s to its channel", session_id)


def enqueue_delivery(session_id: str) -> None:
    enqueue(DELIVER_TASK, session_id, task_name=f"channel-events:{session_id}")
