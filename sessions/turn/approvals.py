"""Deciding parked tool calls: approve runs the call once, deny tells the model why."""
from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from sessions.turn import lifecycle
from sessions.turn.admission import AdmissionError
from sessions.eventlog.events import append_events, operator_acted
from sessions.models import EventType, Session, ToolCall


def pending_approvals(session: Session) -> QuerySet[ToolCall]:
    """The session's calls waiting for a decision, oldest first (a queryset: the API pages through it)."""
    return ToolCall.objects.filter(session=session, status=ToolCall.Status.AWAITING_APPROVAL).order_by("id")


def resolve_approval(session: Session, call_id: str, decision: str, principal, reason: str = "") -> ToolCall:
    """Record the decision and resume the turn once none of its calls still waits.

    An operator deciding on someone else's session is recorded with the decision (`operator.acted`).
    Raises AdmissionError 404 for an unknown call and 409 for one already decided.
    """
    if decision not in ToolCall.Decision.values:
        raise AdmissionError("invalid_decision", "decision must be 'approve' or 'deny'", 400)
    rows = ToolCall.objects.filter(session=session, call_id=call_id).order_by("-id")
    row = rows.filter(status=ToolCall.Status.AWAITING_APPROVAL).first() or rows.first()
    if row is None:
        raise AdmissionError("approval_not_found", f"no tool call {call_id!r} on this session", 404)
    decided_by = principal.as_dict()
    hooks = session.hooks()  # loaded before the write lock is taken
    with transaction.atomic():
        lifecycle.principal_turn_lock(session)  # first: the lifecycle's lock order (resuming may take a slot)
        if not row.resolve(decision, decided_by, reason):
            row.refresh_from_db()
            raise AdmissionError(
                "already_resolved", f"tool call {call_id!r} is not awaiting approval (it is {row.status})", 409
            )
        events = [(EventType.ACTION_APPROVAL_RESOLVED, {
            "callId": row.call_id, "toolName": row.tool, "decision": decision, "reason": reason,
            "decidedBy": decided_by,
        })]
        if principal.oversees(session):
            events.append(operator_acted(principal, decision, row.call_id))
        append_events(session.id, events, row.turn_id, hooks)
        if not ToolCall.objects.filter(turn_id=row.turn_id, status=ToolCall.Status.AWAITING_APPROVAL).exists():
            lifecycle.resume_parked(row.turn_id, hooks=hooks)
    return row
