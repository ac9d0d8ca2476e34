"""A handoff of a session to another model (sessions.handoff): its write-ahead record."""
from __future__ import annotations

from django.db import models
from django.utils import timezone

from sessions.models.ids import new_id
from sessions.models.session import Session


def new_handoff_id() -> str:
    return new_id("hof")


class Handoff(models.Model):
    """Written before anything changes, and ended exactly once: completed, or failed with the session
    left on its source model. A pending row whose process died is failed by the recovery sweep."""

    class Status(models.TextChoices):
        PENDING = "pending"
        COMPLETED = "completed"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=40, default=new_handoff_id, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="handoffs")
    # The turn row that holds the session's execution lock while the handoff runs.
    turn = models.ForeignKey("Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    from_model = models.CharField(max_length=200)
    to_model = models.CharField(max_length=200)
    review_id = models.CharField(max_length=64)
    review = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    code = models.CharField(max_length=64, blank=True)
    requested_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.id

    def end(self, status: str, error: str = "", code: str = "") -> bool:
        """Move a pending record to its end; False if it had ended already."""
        now = timezone.now()
        won = Handoff.objects.filter(pk=self.pk, status=self.Status.PENDING).update(
            status=status, error=error, code=code, ended_at=now)
        if won:
            self.status, self.error, self.code, self.ended_at = status, error, code, now
        return bool(won)

    def commit_model(self) -> bool:
        """Bind the session to the target model, while this handoff's turn still holds its lock."""
        return bool(Session.objects.filter(pk=self.session_id, active_turn=self.turn_id).update(model=self.to_model))
