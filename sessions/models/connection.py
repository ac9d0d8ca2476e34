"""ChannelConnection: who keeps a channel's connection to its provider open (Slack's Socket Mode).

Such a connection must be open once per deployment, whichever process or host holds it: one row
per (agent, channel) names its holder and how long its lease runs. The holder renews it every
few seconds; a holder that dies stops renewing, the lease lapses, and another process claims it.
Every move is a conditional update that says whether it won.
"""
from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, models, transaction
from django.db.models import Q


class ChannelConnection(models.Model):
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=64)
    # "<host>:<pid>:<nonce>" of the process holding the lease; empty: nobody has yet.
    holder = models.CharField(max_length=128, blank=True)
    held_until = models.DateTimeField(null=True, blank=True)
    # When the holder claimed it (a renewal keeps it), and when its transport last came up.
    held_since = models.DateTimeField(null=True, blank=True)
    connected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "channel"], name="channel_connection_once")]

    @classmethod
    def claim(cls, agent_id: int, channel: str, holder: str, now: datetime, until: datetime) -> bool:
        """`holder` holds the lease until `until` if nobody does (or their lease lapsed); False otherwise."""
        rows = cls.objects.filter(agent_id=agent_id, channel=channel)
        if not rows.exists():
            try:
                with transaction.atomic():
                    cls.objects.create(agent_id=agent_id, channel=channel)
            except IntegrityError:
                pass  # another process made the row first: the claim below races it fairly
        free = Q(held_until__isnull=True) | Q(held_until__lt=now)
        # A holder claims again when it has no connection open (a new release, say): not connected.
        return bool(rows.filter(free).exclude(holder=holder).update(holder=holder, held_until=until,
                                                                     held_since=now, connected_at=None)
                    or rows.filter(holder=holder).update(held_until=until, connected_at=None))

    @classmethod
    def renew(cls, agent_id: int, channel: str, holder: str, until: datetime) -> bool:
        """Extend `holder`'s lease; False if another process has claimed it since."""
        return bool(cls.objects.filter(agent_id=agent_id, channel=channel, holder=holder).update(held_until=until))

    @classmethod
    def mark_connected(cls, agent_id: int, channel: str, holder: str, at: datetime | None) -> bool:
        """The holder's transport came up at `at` (None: it is down)."""
        return bool(cls.objects.filter(agent_id=agent_id, channel=channel, holder=holder)
                    .update(connected_at=at))

    @classmethod
    def release(cls, agent_id: int, channel: str, holder: str) -> bool:
        """Give the lease up at once (a process stopping cleanly): another takes over without waiting."""
        return bool(cls.objects.filter(agent_id=agent_id, channel=channel, holder=holder)
                    .update(held_until=None, connected_at=None))
