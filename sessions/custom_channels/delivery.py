"""Handing a session's events to its channel's events map (the django-q2 task), and the sweep's parts.

One delivery at a time per session, under a lease on the session row
(`ChannelBinding.claim_channel_lease`); it calls the handlers in index order
and moves `channel_cursor` past each event it handed over. If its worker
dies, the lease lapses and the recovery sweep enqueues a new delivery
(`redeliver_lapsed`), which starts at the event the dead one was on: at least
once, and exactly once unless a worker dies inside a handler. A delivery
whose enqueue was lost (a crash between commit and enqueue) is made good by
the session's next one, or by `rescan_undelivered`, which the recovery sweep
runs every AGENTSITE_CHANNEL_RESCAN_SECONDS.
"""
from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from agents.channels import LoadedChannel
from agents.discovery import load_deployment
from agents.secrets.store import acting_for
from sessions.eventlog.channel_delivery import enqueue_delivery
from sessions.custom_channels.context import ChannelContext
from sessions.custom_channels.state import ChannelHandle
from sessions.eventlog.events import read_events
from sessions.messaging.limits import descent
from sessions.models import ChannelDelivery, Event, Session
from sessions.principal import Principal
from sessions.turn import extensions

log = logging.getLogger("sessions.custom_channels")

# A delivery renews its lease after each event it hands over; one handler running longer
# than this may see the events after it handed over twice (a second delivery takes over).
DELIVERY_LEASE = timedelta(seconds=120)
DELIVERY_BATCH = 200
# Channels whose sessions the HTTP API and the timers open: they have no events map.
BUILT_IN_CHANNELS = ("http", "schedule", "reminder", "tool")


def deliver_channel_events(session_id: str) -> int:
    """The django-q2 task: hand the session's undelivered events to its channel's events map.

    1. Take the session's delivery lease (a conditional update: free or lapsed); held: the
       delivery holding it will see these events too (step 4), so stop here.
    2. Read the events from `channel_cursor` on, and call each handler the event's type
       selects, in index order; a failing one is logged.
    3. After each event that had handlers, move the cursor past it and renew the lease: a
       worker that dies mid-delivery leaves the cursor at the event it was on, and the
       recovery sweep enqueues a delivery for the lapsed lease, which starts there.
    4. Release the lease, then look again: events stored while it was held (whose own
       delivery found it held) are delivered now.
    Returns how many events were handed over.
    """
    delivered = 0
    while True:
        row = Session.objects.select_related("agent", "deployment").filter(pk=session_id).first()
        if row is None:
            return delivered
        try:
            channel = load_deployment(row.deployment).channels.get(row.channel)
        except Exception:
            log.exception("cannot load the channel of %s", session_id)
            return delivered
        if channel is None or row.channel_cursor >= row.next_event_index:
            return delivered
        now = timezone.now()
        if not row.claim_channel_lease(now, now + DELIVERY_LEASE):
            return delivered
        try:
            with acting_for(row.agent.slug):
                delivered += _deliver_claimed(row, channel)
        finally:
            row.release_channel_lease()


def _deliver_claimed(row: Session, channel: LoadedChannel) -> int:
    """Step 2 and 3 of `deliver_channel_events`, under the lease."""
    ctx = ChannelContext(agent=row.agent, channel_id=row.channel, session_row=row,
                         principal=Principal(authenticator=row.authenticator, principal_id=row.principal_id,
                                             principal_type=row.principal_type))
    handle = ChannelHandle(id=row.channel, session_id=row.id)
    cursor = Session.objects.filter(pk=row.pk).values_list("channel_cursor", flat=True).first() or 0
    delivered = 0
    descents: dict[str, dict | None] = {}
    while True:
        events = read_events(row.id, cursor, limit=DELIVERY_BATCH)
        if not events:
            return delivered
        for envelope in events:
            handlers = channel.handlers_for(envelope["type"])
            if handlers:
                # What a handler sends on an event of an agents' turn goes on counting on its budget.
                turn_id = envelope.get("turnId") or ""
                if turn_id not in descents:
                    descents[turn_id] = descent(turn_id)
                ctx.origin = descents[turn_id]
            for handler in handlers:
                try:
                    handler(envelope, handle, ctx)
                except Exception:
                    log.exception("channel %s: the %s handler failed on %s#%s", row.channel, envelope["type"],
                                  row.id, envelope["index"])
            cursor = envelope["index"] + 1
            delivered += 1
            if handlers:
                row.advance_channel_cursor(cursor, renew_until=timezone.now() + DELIVERY_LEASE)
        row.advance_channel_cursor(cursor)


def prune_deliveries(now=None) -> int:
    """The recovery sweep's part: forget delivery ids older than AGENTSITE_CHANNEL_DELIVERY_DAYS."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.AGENTSITE_CHANNEL_DELIVERY_DAYS)
    return ChannelDelivery.objects.filter(created_at__lt=cutoff).delete()[0]


def rescan_undelivered(limit: int = 500) -> int:
    """Enqueue a delivery for each custom-channel session with events past its cursor and no
    delivery running: the ones whose enqueue was lost. A session whose channel wants none of
    them has its cursor moved to the end instead. Returns how many deliveries it enqueued."""
    behind = (Session.objects.exclude(channel__in=BUILT_IN_CHANNELS)
              .filter(channel_cursor__lt=F("next_event_index"), channel_lease_until__isnull=True)
              .select_related("deployment").only("id", "channel", "channel_cursor", "next_event_index",
                                                 "deployment")[:limit])
    enqueued = 0
    for row in behind:
        try:
            channel = load_deployment(row.deployment).channels.get(row.channel)
        except Exception:
            log.exception("cannot load the channel of %s", row.id)
            continue
        types = set(Event.objects.filter(session_id=row.id, index__gte=row.channel_cursor)
                    .values_list("type", flat=True).distinct()) if channel is not None else set()
        if any(channel.handlers_for(t) for t in types):
            enqueue_delivery(row.id)
            enqueued += 1
        else:
            row.skip_channel_events(row.channel_cursor, row.next_event_index)
    return enqueued


def redeliver_lapsed(now=None) -> int:
    """The recovery sweep's part: enqueue a delivery for each session whose delivery lease lapsed
    (its worker died mid-delivery). Claiming is conditional, so a duplicate task is harmless."""
    now = now or timezone.now()
    lapsed = list(Session.objects.filter(channel_lease_until__lt=now).values_list("id", flat=True)[:500])
    for session_id in lapsed:
        enqueue_delivery(session_id)
    return len(lapsed)


_next_rescan = 0.0  # this process's first sweep rescans


def rescan_seldom(now) -> None:
    """A recovery sweep's step: the rescan of the session table and the pruning of old delivery ids, once
    every AGENTSITE_CHANNEL_RESCAN_SECONDS in this process."""
    global _next_rescan
    if time.monotonic() >= _next_rescan:
        _next_rescan = time.monotonic() + settings.AGENTSITE_CHANNEL_RESCAN_SECONDS
        rescan_undelivered()
        prune_deliveries(now)


def register() -> None:
    # Lapsed deliveries only in the passes whose question finds one (sessions.sql.recovery).
    extensions.add_recovery_step("custom channel deliveries", redeliver_lapsed, when="deliveries")
    extensions.add_recovery_step("custom channel rescan", rescan_seldom)
