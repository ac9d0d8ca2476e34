"""ToolCall: one tool call of a turn (a subagent's included), stored before it runs."""
from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from sessions.models.session import Session, Turn


class ToolCall(models.Model):
    """Stored before it runs and moved to `running` with a conditional update, so it never runs twice."""

    class Status(models.TextChoices):
        REQUESTED = "requested"
        AWAITING_APPROVAL = "awaiting_approval"
        APPROVED = "approved"
        DENIED = "denied"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        INTERRUPTED = "interrupted"

    class Decision(models.TextChoices):
        APPROVE = "approve"
        DENY = "deny"

    # A call in one of these has its outcome; every other status can still change.
    SETTLED = (Status.DONE, Status.FAILED, Status.DENIED, Status.INTERRUPTED)
    # Calls that may still run: a turn that ends leaves them unrun.
    RUNNABLE = (Status.REQUESTED, Status.AWAITING_APPROVAL, Status.APPROVED)

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="tool_calls")
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_calls")
    call_id = models.CharField(max_length=100)
    tool = models.CharField(max_length=100)
    input = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.REQUESTED)
    stubbed = models.BooleanField(default=False)
    # A question to the person (Tool.question): it waits like a call for approval, and is answered, not run.
    question = models.BooleanField(default=False)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    decided_by = models.JSONField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
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

    def _move(self, expect: tuple[str, ...], **fields: Any) -> bool:
        """The one shape of every transition: change the row only if it is still in `expect`."""
        won = ToolCall.objects.filter(pk=self.pk, status__in=expect).update(**fields)
        if won:
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(won)

    def resolve(self, decision: str, decided_by: dict, reason: str = "") -> bool:
        """awaiting_approval → approved | denied; False if someone already decided."""
        status = self.Status.APPROVED if decision == self.Decision.APPROVE else self.Status.DENIED
        return self._move((self.Status.AWAITING_APPROVAL,), status=status, decided_by=decided_by, reason=reason,
                          decided_at=timezone.now())

    def answer(self, answer: str, answered_by: dict) -> bool:
        """awaiting_approval → done, the answer its output: a question answered (False: it was already)."""
        now = timezone.now()
        return self._move((self.Status.AWAITING_APPROVAL,), status=self.Status.DONE, output=answer,
                          decided_by=answered_by, decided_at=now, ended_at=now)

    def start(self) -> bool:
        """requested | approved → running: the caller whose update wins runs the call, exactly once."""
        return self._move((self.Status.REQUESTED, self.Status.APPROVED), status=self.Status.RUNNING,
                          started_at=timezone.now())

    def succeed(self, output: Any) -> bool:
        return self._move((self.Status.RUNNING,), status=self.Status.DONE, output=output, ended_at=timezone.now())

    def fail(self, error: str, *, expect: tuple[str, ...] = (Status.RUNNING,)) -> bool:
        return self._move(expect, status=self.Status.FAILED, error=error, ended_at=timezone.now())

    def explain_denial(self, suffix: str = "") -> bool:
        """A denied call's error is the denial, so the model (or caller) sees who said no and why."""
        who = (self.decided_by or {}).get("principalId", "someone")
        error = f"denied by {who}" + (f": {self.reason}" if self.reason else "") + suffix
        return self._move((self.Status.DENIED,), error=error, ended_at=timezone.now())

    def abandon(self, error: str) -> bool:
        """Any unsettled status → interrupted: the call will never run (again)."""
        expect = tuple(s for s in self.Status if s not in self.SETTLED)
        return self._move(expect, status=self.Status.INTERRUPTED, error=error, ended_at=timezone.now())
