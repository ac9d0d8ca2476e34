"""Durable timers: deploy-time schedules and run-time reminders."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from django.db import models
from django.db.models import F
from django.utils import timezone

from agents.schedules import next_after
from sessions.models.ids import new_id
from sessions.models.session import Session


def new_reminder_id() -> str:
    return new_id("rem")


class Schedule(models.Model):
    """A deploy-time cron schedule of an agent: `agent/schedules/<id>.md` or `.py`."""

    class Kind(models.TextChoices):
        MARKDOWN = "markdown"
        HANDLER = "handler"

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="schedules")
    schedule_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    cron = models.CharField(max_length=100)
    title = models.CharField(max_length=200, blank=True)
    prompt = models.TextField(blank=True)
    # False once a deployment no longer has the file: removing it stops the schedule.
    active = models.BooleanField(default=True)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    fire_count = models.PositiveIntegerField(default=0)
    last_session_ids = models.JSONField(default=list, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent", "schedule_id"]
        constraints = [models.UniqueConstraint(fields=["agent", "schedule_id"], name="schedule_agent_id_unique")]
        indexes = [models.Index(fields=["active", "next_fire_at"], name="schedule_due")]

    def __str__(self) -> str:
        return f"{self.agent.slug}/{self.schedule_id}"

    def claim(self, due: datetime, now: datetime) -> bool:
        """Own the firing due at `due`: only one caller's conditional update changes the row.

        The instance keeps the `next_fire_at` it was read with: the firing is the one due then.
        """
        return bool(Schedule.objects.filter(pk=self.pk, active=True, next_fire_at=due).update(
            next_fire_at=next_after(self.cron, max(due, now)), last_fired_at=now, fire_count=F("fire_count") + 1))

    def record_run(self, session_ids: list[str], error: str) -> bool:
        """What the claimed firing did: the sessions it started, or why it failed."""
        won = Schedule.objects.filter(pk=self.pk).update(last_session_ids=session_ids, last_error=error)
        if won:
            self.last_session_ids, self.last_error = session_ids, error
        return bool(won)

    @staticmethod
    def retire_missing(agent: Any, kept: Iterable[str]) -> int:
        """Active schedules of `agent` not in `kept` (their file is gone from the deployment) → inactive."""
        return Schedule.objects.filter(agent=agent, active=True).exclude(schedule_id__in=kept).update(
            active=False, next_fire_at=None)


class Reminder(models.Model):
    """A run-time timer bound to one session: wakes it with a prompt, or calls a handler."""

    class Kind(models.TextChoices):
        DELAY = "delay"
        EVERY = "every"
        CRON = "cron"

    class Status(models.TextChoices):
        ARMED = "armed"
        DONE = "done"
        CANCELLED = "cancelled"
        DISARMED = "disarmed"

    id = models.CharField(primary_key=True, max_length=40, default=new_reminder_id, editable=False)
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL, related_name="reminders")
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="reminders")
    title = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    spec = models.CharField(max_length=100, help_text="'20m', '2h' or a cron expression")
    prompt = models.TextField(blank=True, help_text="prompt form: the message that wakes the session")
    until = models.TextField(blank=True, help_text="prompt form: when the model should stop, stated to it")
    # Run form: the handler lives only in the memory of the process that made it.
    handler_owner = models.CharField(max_length=100, blank=True)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    fire_count = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ARMED)
    reason = models.CharField(max_length=200, blank=True)
    created_by = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["next_fire_at", "created_at"]
        indexes = [models.Index(fields=["status", "next_fire_at"], name="reminder_due")]

    def __str__(self) -> str:
        return f"{self.id} ({self.kind} {self.spec}, {self.status})"

    @property
    def is_run_form(self) -> bool:
        return bool(self.handler_owner)

    def claim(self, due: datetime, now: datetime, next_fire_at: datetime | None) -> bool:
        """Own the firing due at `due` (armed, still due then): it moves on to `next_fire_at`, or
        ends as done when there is none. The winner's instance is read again (its fire count)."""
        update: dict[str, Any] = {"next_fire_at": next_fire_at, "last_fired_at": now,
                                  "fire_count": F("fire_count") + 1}
        if next_fire_at is None:
            update.update(status=self.Status.DONE, reason="fired")
        won = Reminder.objects.filter(pk=self.pk, status=self.Status.ARMED, next_fire_at=due).update(**update)
        if won:
            self.refresh_from_db()
        return bool(won)

    def note(self, reason: str) -> bool:
        """Say why a firing went wrong (a failing handler) without ending the reminder."""
        reason = reason[:200]
        won = Reminder.objects.filter(pk=self.pk).update(reason=reason)
        if won:
            self.reason = reason
        return bool(won)

    def end(self, status: str, reason: str = "") -> bool:
        """armed → done | cancelled | disarmed; False if it had already ended."""
        won = Reminder.objects.filter(pk=self.pk, status=self.Status.ARMED).update(
            status=status, reason=reason, next_fire_at=None
        )
        if won:
            self.status, self.reason, self.next_fire_at = status, reason, None
        return bool(won)
