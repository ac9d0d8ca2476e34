"""ChannelBinding: what ties a session to the channel that owns it, and the moves of that tie.

A session belongs to one channel (`http`, `schedule`, a custom channel's id).
A custom channel's session also has its continuation key (hashed), its
channel state (JSON) and the delivery of its events to the channel's events
map: `channel_cursor` (the next event index not handed over yet) and
`channel_lease_until` (the lease of the one delivery doing it,
sessions.custom_channels.deliver_channel_events). Every change to them is a
method here; `Session` inherits the fields and the methods.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from django.db import models, transaction


class ChannelBinding(models.Model):
    channel = models.CharField(max_length=64, default="http")
    # A custom channel's continuation key (`pr:owner/repo#12`), hashed to a fixed width:
    # one session per (agent, channel, key), enforced by a unique constraint on Session so
    # two deliveries racing with the same new key create one session.
    channel_key_hash = models.CharField(max_length=64, blank=True)
    # The custom channel's per-session state (JSON), changed under the session row's lock.
    channel_state = models.JSONField(default=dict, blank=True)
    # The next event index the channel's events map has not been handed yet, and the lease of
    # the delivery handing them over (sessions.custom_channels.deliver_channel_events).
    channel_cursor = models.PositiveIntegerField(default=0)
    channel_lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def _bind(self, condition: models.Q, **fields: Any) -> bool:
        """The one shape of every move: change the row only if it still meets `condition`."""
        won = type(self)._default_manager.filter(condition, pk=self.pk).update(**fields)
        if won:
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(won)

    # -- the events-map delivery -------------------------------------------------------
    def claim_channel_lease(self, now: datetime, until: datetime) -> bool:
        """No lease (or a lapsed one) → held until `until`; False while another delivery holds it."""
        free = models.Q(channel_lease_until__isnull=True) | models.Q(channel_lease_until__lt=now)
        return self._bind(free, channel_lease_until=until)

    def advance_channel_cursor(self, cursor: int, *, renew_until: datetime | None = None) -> bool:
        """Move the cursor past what the lease holder handed over (and renew its lease)."""
        fields: dict[str, Any] = {"channel_cursor": cursor}
        if renew_until is not None:
            fields["channel_lease_until"] = renew_until
        return self._bind(models.Q(), **fields)

    def release_channel_lease(self) -> bool:
        return self._bind(models.Q(), channel_lease_until=None)

    def skip_channel_events(self, seen_cursor: int, to: int) -> bool:
        """Cursor `seen_cursor` → `to` (events its channel wants none of); False if a delivery moved it."""
        return self._bind(models.Q(channel_cursor=seen_cursor), channel_cursor=to)

    # -- the channel state -------------------------------------------------------------
    @classmethod
    def change_channel_state(cls, session_id: str, fn: Callable[[dict[str, Any]], Any]) -> Any:
        """Replace the session's channel state with `fn(current)`, read and written under the row lock
        (two changes at once both land); returns the new state. No such session: `DoesNotExist`."""
        with transaction.atomic():
            rows = cls._default_manager.filter(pk=session_id)
            row = rows.select_for_update().only("channel_state").first()
            if row is None:
                raise cls.DoesNotExist(session_id)
            value = fn(dict(row.channel_state or {}))
            rows.update(channel_state=value)
        return value
