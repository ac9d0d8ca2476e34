"""Durable storage behind `ctx.host`: an agent's key-value store and file store, a session's artifacts.

All three live in the database (content as BLOB / bytea), so any web or
worker process, on any machine, reads what another wrote; nothing is kept
in process memory or on one machine's disk. Content columns are deferred by
default: lists and lookups never read the bytes they do not return.
"""
from __future__ import annotations

from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.utils import timezone

from sessions.models.session import Session


class WithoutContent(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().defer("content")


class KVEntry(models.Model):
    """One key of an agent's key-value store: agent-wide (no session) or scoped to one session."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="kv_entries")
    key = models.CharField(max_length=512)
    value = models.JSONField()
    # Bumped by every write: compare-and-set updates only the version it read.
    version = models.PositiveBigIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "key-value entry"
        verbose_name_plural = "key-value entries"
        ordering = ["agent", "session", "key"]
        # One row per key and scope. Two partial constraints because NULLs are
        # distinct in a unique index: (agent, NULL, key) would not collide.
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], condition=Q(session=None), name="kv_agent_key_unique"),
            models.UniqueConstraint(fields=["session", "key"], condition=Q(session__isnull=False),
                                    name="kv_session_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id or self.agent_id}:{self.key}"

    @staticmethod
    def replace(pk: int, version: int, value) -> bool:
        """Write `value` if the row is still at `version`; True only for the writer whose update won."""
        return bool(KVEntry.objects.filter(pk=pk, version=version).update(
            value=value, version=version + 1, updated_at=timezone.now()))

    @staticmethod
    def remove(pk: int, version: int) -> bool:
        """Delete the row if it is still at `version`; True only for the writer whose delete won.

        One conditional DELETE: nothing cascades from a KV entry and nothing
        listens to its deletes, so the collector deletes by the filter itself
        rather than selecting the rows first (a write between the two would be
        lost). tests/sessions/test_kv_remove.py checks it stays one statement.
        """
        return KVEntry.objects.filter(pk=pk, version=version).delete()[0] == 1


class HostFile(models.Model):
    """A file of an agent's durable file store (`ctx.host.files`), by relative POSIX path."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=1024)
    content = models.BinaryField()
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = WithoutContent()

    class Meta:
        verbose_name = "host file"
        ordering = ["agent", "path"]
        constraints = [models.UniqueConstraint(fields=["agent", "path"], name="host_file_agent_path_unique")]

    def __str__(self) -> str:
        return self.path


class Artifact(models.Model):
    """A file a session's turn produced, listed on the session and downloadable by its principal."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=255, default="application/octet-stream")
    content = models.BinaryField()
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    # Who produced it last: the turn and tool call (blank outside a turn, e.g. a reminder's handler).
    turn_id = models.CharField(max_length=40, blank=True)
    call_id = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = WithoutContent()

    class Meta:
        ordering = ["session", "created_at", "name"]
        constraints = [models.UniqueConstraint(fields=["session", "name"], name="artifact_session_name_unique")]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.name}"

    def read(self) -> bytes:
        """The content, read on demand (it is deferred everywhere else)."""
        content = Artifact.objects.filter(pk=self.pk).values_list("content", flat=True).first()
        return bytes(content) if content is not None else b""


class ChannelDelivery(models.Model):
    """A webhook delivery a channel has acted on, by its id (GitHub's `X-GitHub-Delivery`,
    Slack's `event_id`): a redelivery finds its row and starts nothing.

    Only the id's hash is kept. Rows older than `AGENTSITE_CHANNEL_DELIVERY_DAYS`
    are pruned by the recovery sweep; providers stop redelivering long before.
    """

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=64)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "channel", "key_hash"],
                                               name="channel_delivery_once")]

    @staticmethod
    def claim(agent: Any, channel: str, key_hash: str) -> bool:
        """Record that `channel` acts on the delivery of hash `key_hash`; False if it already did.

        Its own savepoint: the losing insert of two racing copies leaves the caller's transaction usable.
        """
        try:
            with transaction.atomic():
                ChannelDelivery.objects.create(agent=agent, channel=channel, key_hash=key_hash)
        except IntegrityError:
            return False
        return True
