"""The event log's row and its vocabulary (DESIGN.md, "Events")."""
from __future__ import annotations

from enum import StrEnum

from django.db import models
from django.utils import timezone

from sessions.instants import iso_z


class EventType(StrEnum):
    SESSION_STARTED = "session.started"
    AB_ASSIGNED = "ab.assigned"
    SESSION_WAITING = "session.waiting"
    SESSION_COMPLETED = "session.completed"
    SESSION_FAILED = "session.failed"
    AGENT_BOUND = "agent.bound"
    MESSAGE_RECEIVED = "message.received"
    # Not in DESIGN.md's table: a turn held back by the principal's running-turn cap
    # (AGENTSITE_MAX_RUNNING_TURNS): {waitingFor: "running_turns_cap", runningTurnsCap: N}.
    TURN_QUEUED = "turn.queued"
    TURN_STARTED = "turn.started"
    # {usage, durationMs, timings} and {error, code, usage, durationMs?, timings} (sessions.turn.timings).
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    STEP_STARTED = "step.started"
    STEP_COMPLETED = "step.completed"
    REASONING_APPENDED = "reasoning.appended"
    REASONING_COMPLETED = "reasoning.completed"
    MESSAGE_APPENDED = "message.appended"
    MESSAGE_COMPLETED = "message.completed"
    ACTIONS_REQUESTED = "actions.requested"
    ACTION_RESULT = "action.result"
    ACTION_APPROVAL_REQUESTED = "action.approval_requested"
    ACTION_APPROVAL_RESOLVED = "action.approval_resolved"
    SUBAGENT_CALLED = "subagent.called"
    SUBAGENT_COMPLETED = "subagent.completed"
    # A model call failed for the provider's reasons and the same step went to the agent's next
    # declared fallback: {from, to, reason (the error's code), error, step} (sessions.turn.runner).
    MODEL_FALLBACK = "model.fallback"
    # Spending crossed 80% of a budget the turn is under (sessions.spend).
    BUDGET_WARNING = "budget.warning"
    # An operator approved, denied, stopped (a session or one turn) or cancelled a reminder of someone
    # else's session: {operator, action, callId?, turnId?, reminderId?}.
    OPERATOR_ACTED = "operator.acted"
    # A handoff to another model ended: {handoffId, from, to, status: completed | failed, review,
    # requestedBy?, error?, code?} (sessions.handoff).
    SESSION_HANDOFF = "session.handoff"
    # Not in DESIGN.md's table: a file a turn produced was stored (`ctx.host.artifacts.save`).
    ARTIFACT_SAVED = "artifact.saved"
    # Not in DESIGN.md's table: the model's plan for the session, whole (the `todos` built-in,
    # sessions.harness.todos): {items: [{content, status: pending | in_progress | done}], callId}.
    TODOS_UPDATED = "todos.updated"


class Event(models.Model):
    session = models.ForeignKey("Session", on_delete=models.CASCADE, related_name="events")
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
            "at": iso_z(self.at),
            "data": self.data,
        }
