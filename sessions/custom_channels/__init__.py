"""Custom channels at run time: the sessions they own, their state, their events map.

A channel (`agent/channels/<id>.py`, see agents.channels) reaches sessions
through a `ChannelContext`: the routes get one per request (with the
request's parts, built by channels_app.custom_channels), `on_start` one per
web process, the events map and `wait_until` work one per task.

Continuation keys are the channel's own (`pr:owner/repo#12`,
`C123:1712345.678`): the same key from the same principal (from anyone, on a
channel with `shared_sessions`) reaches the same durable session. The key's
hash is on the session under a unique constraint (agent, channel, key), so
of two deliveries racing with a new key one inserts the session and the
other's insert fails and becomes a follow-up on it.

Delivery of events to the events map (`deliver_channel_events`, a django-q2
task enqueued after commit by sessions.eventlog.channel_delivery): one delivery at a
time per session, under a lease on the session row; it calls the handlers in
index order and moves `channel_cursor` past each event it handed over. If its
worker dies, the lease lapses and the recovery sweep enqueues a new delivery,
which starts at the event the dead one was on: at least once, and exactly once
unless a worker dies inside a handler. A delivery whose enqueue was lost (a
crash between commit and enqueue) is made good by the session's next one, or
by `rescan_undelivered`, which the recovery sweep runs every
AGENTSITE_CHANNEL_RESCAN_SECONDS.

    state.py       handles, `ChannelState`, `ChannelError`, the key hashes
    context.py     `ChannelContext`
    delivery.py    `deliver_channel_events` and the recovery sweep's parts
    background.py  `run_in_background`, the task of `wait_until`

The task paths queued in django-q2 name this package
(`sessions.custom_channels.deliver_channel_events`, `.run_in_background`):
queued tasks outlive a deploy, so these names stay importable here.
"""
from __future__ import annotations

from sessions.custom_channels.background import run_in_background
from sessions.custom_channels.context import BACKGROUND_MODULES, BACKGROUND_TASK, ChannelContext
from sessions.custom_channels.delivery import (
    BUILT_IN_CHANNELS,
    DELIVERY_BATCH,
    DELIVERY_LEASE,
    deliver_channel_events,
    prune_deliveries,
    redeliver_lapsed,
    rescan_undelivered,
)
from sessions.custom_channels.state import (
    ChannelError,
    ChannelHandle,
    ChannelState,
    SessionHandle,
    SessionNotFound,
    key_hash,
    owned_key_hash,
)

__all__ = [
    "BACKGROUND_MODULES", "BACKGROUND_TASK", "BUILT_IN_CHANNELS", "DELIVERY_BATCH", "DELIVERY_LEASE",
    "ChannelContext", "ChannelError", "ChannelHandle", "ChannelState", "SessionHandle", "SessionNotFound",
    "deliver_channel_events", "key_hash", "owned_key_hash", "prune_deliveries", "redeliver_lapsed", "rescan_undelivered", "run_in_background",
]
