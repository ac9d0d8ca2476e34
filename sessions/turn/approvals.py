"""Deciding parked tool calls: approve runs the call once, deny tells the model why, and a question's
answer is its result."""
from __future__ import annotations

import re

from django.db import transaction
from django.db.models import QuerySet

from sessions.turn import lifecycle
from sessions.turn.admission import AdmissionError
from sessions.eventlog.events import append_events, operator_acted
from sessions.eventlog.storable import text_problem
from sessions.models import EventType, Session, ToolCall

MAX_ANSWER_CHARS = 4000
# Blanks around an answer: Unicode's spaces, and the byte-order mark a pasted text may begin with.
_BLANKS = re.compile(r"^[\s\ufeff]+|[\s\ufeff]+$")


def pending_approvals(session: Session) -> QuerySet[ToolCall]:
    """The session's calls waiting for a decision, oldest first (a queryset: the API pages through it)."""
    return ToolCall.objects.filter(session=session, status=ToolCall.Status.AWAITING_APPROVAL).order_by("id")


def resolve_approval(session: Session, call_id: str, decision: str, principal, reason: str = "") -> ToolCall:
    """Record the decision and resume the turn once none of its calls still waits.

    Raises AdmissionError 404 for an unknown call and 409 for one already decided (or a question).
    """
    if decision not in ToolCall.Decision.values:
        raise AdmissionError("invalid_decision", "decision must be 'approve' or 'deny'", 400)
    row = parked_call(session, call_id)
    if row.question:
        raise AdmissionError("is_question", f"tool call {call_id!r} is a question to answer, not a call to approve: "
                             f"POST its answer to …/questions/{call_id}", 409)
    decided_by = principal.as_dict()
    _decide(session, row, principal, lambda: row.resolve(decision, decided_by, reason), {
        "callId": row.call_id, "toolName": row.tool, "decision": decision, "reason": reason, "decidedBy": decided_by,
    })
    return row


def answer_question(session: Session, call_id: str, answer: str, principal) -> ToolCall:
    """Record a person's answer to a question the model asked (`ask_question`) as its result, and resume
    the turn once none of its calls still waits. 404 for an unknown call, 409 for a call that is not a
    question or one already answered (or ended with its turn), 400 for an answer that is no answer
    (`checked_answer`): every door's answer passes here."""
    answer = checked_answer(answer)
    row = parked_call(session, call_id)
    if not row.question:
        raise AdmissionError("not_a_question", f"tool call {call_id!r} is not a question waiting for an answer "
                             f"(a call waiting for approval is decided at …/approvals/{call_id})", 409)
    answered_by = principal.as_dict()
    _decide(session, row, principal, lambda: row.answer(answer, answered_by), {
        "callId": row.call_id, "toolName": row.tool, "decision": "answer", "answer": answer, "reason": "",
        "decidedBy": answered_by,
    })
    return row


def checked_answer(answer: object) -> str:
    """An answer as stored: text of 1 to MAX_ANSWER_CHARS characters once the blanks around it are gone,
    which both databases can store; else AdmissionError 400 `invalid_answer`."""
    if not isinstance(answer, str):
        raise AdmissionError("invalid_answer", "an answer is text", 400)
    answer = _BLANKS.sub("", answer)
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        raise AdmissionError("invalid_answer", f"an answer is 1 to {MAX_ANSWER_CHARS} characters, not blank", 400)
    if problem := text_problem(answer):
        raise AdmissionError("invalid_answer", f"the answer {problem}", 400)
    return answer


def parked_call(session: Session, call_id: str) -> ToolCall:
    """The session's call `call_id` (one still waiting first: a call id may repeat across turns); 404 if none."""
    rows = ToolCall.objects.filter(session=session, call_id=call_id).order_by("-id")
    row = rows.filter(status=ToolCall.Status.AWAITING_APPROVAL).first() or rows.first()
    if row is None:
        raise AdmissionError("approval_not_found", f"no tool call {call_id!r} on this session", 404)
    return row


def _decide(session: Session, row: ToolCall, principal, won, resolved: dict) -> None:
    """`won()` moves the row if it still waits; the decision is logged, and the turn resumes if it was the last.

    An operator deciding on someone else's session is recorded with the decision (`operator.acted`).
    """
    hooks = session.hooks()  # loaded before the write lock is taken
    with transaction.atomic():
        lifecycle.principal_turn_lock(session)  # first: the lifecycle's lock order (resuming may take a slot)
        if not won():
            row.refresh_from_db()
            waits = "an answer" if row.question else "approval"
            raise AdmissionError("already_resolved",
                                 f"tool call {row.call_id!r} is not awaiting {waits} (it is {row.status})", 409)
        events = [(EventType.ACTION_APPROVAL_RESOLVED, resolved)]
        if principal.oversees(session):
            events.append(operator_acted(principal, resolved["decision"], row.call_id))
        append_events(session.id, events, row.turn_id, hooks)
        if not ToolCall.objects.filter(turn_id=row.turn_id, status=ToolCall.Status.AWAITING_APPROVAL).exists():
            lifecycle.resume_parked(row.turn_id, hooks=hooks)
