from __future__ import annotations

import hashlib
import logging
import secrets

from django.db import models
from django.utils import timezone


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def new_session_id() -> str:
    return new_id("ses")


def new_turn_id() -> str:
    return new_id("turn")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SessionManager(models.Manager):
    def get_queryset(self) -> "SessionQuerySet":
        # The conversation grows with every turn and only the engine needs it:
        # requests would otherwise read (and parse) all of it on every lookup.
        return SessionQuerySet(self.model, using=self._db).defer("conversation")


class SessionQuerySet(models.QuerySet):
    def for_principal(self, principal) -> "SessionQuerySet":
        return self.filter(principal_id=principal.principal_id, authenticator=principal.authenticator)


class Session(models.Model):
    class Mode(models.TextChoices):
        CHAT = "chat"
        TASK = "task"

    class Status(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        WAITING = "waiting"
        COMPLETED = "completed"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=40, default=new_session_id, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="sessions")
    deployment = models.ForeignKey("agents.Deployment", on_delete=models.PROTECT, related_name="sessions")
    channel = models.CharField(max_length=64, default="http")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.CHAT)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    title = models.CharField(max_length=200, blank=True)
    principal_id = models.CharField(max_length=200)
    principal_type = models.CharField(max_length=32, default="user")
    authenticator = models.CharField(max_length=64)
    continuation_token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    # Allocates event indexes: incremented in the same transaction as the insert.
    next_event_index = models.PositiveIntegerField(default=0)
    options = models.JSONField(default=dict, blank=True)
    # The provider-neutral conversation, so any worker can run the next turn.
    conversation = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    # The one turn allowed to run; claimed with a conditional update.
    active_turn = models.ForeignKey("Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = SessionManager.from_queryset(SessionQuerySet)()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "principal_id", "-created_at"], name="session_owner_recent")]

    def __str__(self) -> str:
        return self.id

    def issue_token(self) -> str:
        """Rotate the continuation token; only its hash is stored."""
        token = f"ct_{self.id}.{secrets.token_urlsafe(24)}"
        self.continuation_token_hash = hash_token(token)
        return token

    def token_matches(self, token: str) -> bool:
        return secrets.compare_digest(hash_token(token), self.continuation_token_hash)

    @staticmethod
    def id_from_token(token: str) -> str | None:
        if not token.startswith("ct_ses_") or "." not in token:
            return None
        return token[3:].split(".", 1)[0]

    def is_owned_by(self, principal) -> bool:
        return self.principal_id == principal.principal_id and self.authenticator == principal.authenticator

    def hooks(self) -> list:
        """The agent's hooks for events written outside a turn's run (decisions, recovery, direct calls).

        A release that no longer loads has no hooks: observing must never stop an event being written.
        """
        from agents.discovery import load_deployment

        try:
            return load_deployment(self.deployment).hooks
        except Exception:
            logging.getLogger(__name__).exception("cannot load the hooks of %s", self.deployment_id)
            return []


class Turn(models.Model):
    class Trigger(models.TextChoices):
        USER = "user"
        REMINDER = "reminder"
        SCHEDULE = "schedule"
        CHANNEL = "channel"
        TOOL = "tool"  # a deterministic tool call holding the session's lock

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        INTERRUPTED = "interrupted"
        AWAITING_APPROVAL = "awaiting_approval"

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.INTERRUPTED)

    id = models.CharField(primary_key=True, max_length=40, default=new_turn_id, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns")
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.USER)
    message = models.TextField(blank=True)
    # What triggered it beyond the kind: a reminder or schedule id.
    source_ref = models.CharField(max_length=100, blank=True)
    admission = models.CharField(max_length=16, default="preempt")
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.QUEUED)
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    interrupt_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    usage = models.JSONField(default=dict, blank=True)
    # Where a parked turn resumes: the messages so far and the step it reached.
    state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["session", "status", "created_at"], name="turn_session_queue"),
            models.Index(fields=["status", "lease_until"], name="turn_recovery"),
        ]

    def __str__(self) -> str:
        return self.id

    def claim(self, worker: str, lease_seconds: float) -> bool:
        """Move queued → running; True only for the one caller whose update won."""
        now = timezone.now()
        fields = {
            "status": self.Status.RUNNING,
            "claimed_by": worker,
            "started_at": now,
            "lease_until": now + timezone.timedelta(seconds=lease_seconds),
        }
        won = Turn.objects.filter(pk=self.pk, status=self.Status.QUEUED).update(**fields)
        if won:
            # The winner's row is now exactly this: no need to read it back.
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(won)

    def renew_lease(self, lease_seconds: float) -> bool:
        return bool(
            Turn.objects.filter(pk=self.pk, status=self.Status.RUNNING, claimed_by=self.claimed_by).update(
                lease_until=timezone.now() + timezone.timedelta(seconds=lease_seconds)
            )
        )

    def request_interrupt(self) -> bool:
        return bool(
            Turn.objects.filter(pk=self.pk)
            .exclude(status__in=self.FINISHED)
            .update(interrupt_requested=True)
        )

    def interrupted(self) -> bool:
        # A turn deleted with its session counts as interrupted: deleting stops the
        # turn first, but the flag goes with the row before a worker can read it.
        return not Turn.objects.filter(pk=self.pk, interrupt_requested=False).exists()


class ToolCall(models.Model):
    """One tool call of a turn, stored before it runs so it is never run twice."""

    class Status(models.TextChoices):
        REQUESTED = "requested"
        AWAITING_APPROVAL = "awaiting_approval"
        APPROVED = "approved"
        DENIED = "denied"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        INTERRUPTED = "interrupted"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="tool_calls")
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_calls")
    call_id = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    input = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.REQUESTED)
    stubbed = models.BooleanField(default=False)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    decided_by = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["turn", "call_id"], name="toolcall_turn_call_unique")]
        indexes = [models.Index(fields=["session", "status"], name="toolcall_session_status")]

    def __str__(self) -> str:
        return f"{self.call_id} {self.tool} ({self.status})"

    def resolve(self, decision: str, decided_by: dict, reason: str = "") -> bool:
        """awaiting_approval → approved | denied; False if someone already decided."""
        status = self.Status.APPROVED if decision == "approve" else self.Status.DENIED
        won = ToolCall.objects.filter(pk=self.pk, status=self.Status.AWAITING_APPROVAL).update(
            status=status, decided_by=decided_by, reason=reason
        )
        if won:
            self.status, self.decided_by, self.reason = status, decided_by, reason
        return bool(won)


class Event(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    index = models.PositiveIntegerField()
    turn_id = models.CharField(max_length=40, blank=True)
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "index"]
        constraints = [models.UniqueConstraint(fields=["session", "index"], name="event_session_index_unique")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.index} {self.type}"

    def envelope(self) -> dict:
        return {
            "type": self.type,
            "index": self.index,
            "sessionId": self.session_id,
            "turnId": self.turn_id or None,
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "data": self.data,
        }



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

    def end(self, status: str, reason: str = "") -> bool:
        """armed → done | cancelled | disarmed; False if it had already ended."""
        won = Reminder.objects.filter(pk=self.pk, status=self.Status.ARMED).update(
            status=status, reason=reason, next_fire_at=None
        )
        if won:
            self.status, self.reason, self.next_fire_at = status, reason, None
        return bool(won)
