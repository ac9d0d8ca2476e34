"""Deterministic tool calls: one server tool, no model, optionally bound to a session.

A session-bound call takes the session's execution lock (its `active_turn`)
with the same conditional update a turn uses, so it never overlaps a turn:
while a turn runs the call gets 409 `session_busy`, and turns admitted while
the call runs queue behind it.
"""
from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from agents.discovery import load_deployment
from agents.models import Agent
from agents.sdk import SessionInfo, ToolContext
from sessions import tools as calls_
from sessions.admission import AdmissionError, dispatch_next
from sessions.events import append_events
from sessions.models import Session, ToolCall, Turn
from sessions.timers import Host


def call_tool(agent: Agent, name: str, raw_input: Any, *, session: Session | None = None) -> dict[str, Any]:
    deployment = session.deployment if session else agent.active_deployment
    if deployment is None:
        raise AdmissionError("agent_not_deployed", f"agent {agent.slug!r} has no active deployment", 409)
    loaded = load_deployment(deployment)
    tool = loaded.tools.get(name)
    if tool is None:
        raise AdmissionError("tool_not_found", f"agent {agent.slug!r} has no tool {name!r}; tools: "
                             f"{', '.join(sorted(loaded.tools)) or 'none'}", 404)
    try:
        validated = tool.input_model.model_validate(raw_input)
    except ValidationError as exc:
        details = [{"field": ".".join(str(p) for p in e["loc"]) or "input", "message": e["msg"], "type": e["type"]}
                   for e in exc.errors(include_url=False, include_input=False)]
        raise AdmissionError("invalid_input", calls_.validation_message(exc), 400, details) from None

    call_id = f"call_{uuid.uuid4().hex[:16]}"
    if session is None:
        ctx = ToolContext(session=None, call_id=call_id, host=Host(session=None, agent=agent))
        started = time.monotonic()
        try:
            output = calls_.json_safe(tool(validated, ctx))
        except Exception as exc:
            raise AdmissionError("tool_error", f"{type(exc).__name__}: {exc}", 422) from None
        return {"callId": call_id, "toolName": name, "output": output, "stubbed": False,
                "durationMs": round((time.monotonic() - started) * 1000, 1)}
    return _call_in_session(session, tool, name, validated, call_id, loaded.hooks)


def _call_in_session(session: Session, tool, name: str, validated, call_id: str, hooks) -> dict[str, Any]:
    options = session.options or {}
    as_of = datetime.fromisoformat(options["asOf"]) if options.get("asOf") else None
    if as_of is not None and tool.time_args:
        if refusal := calls_.check_time_args(tool.time_args, validated, as_of):
            raise AdmissionError("invalid_input", refusal, 400)
    with transaction.atomic():
        turn = Turn.objects.create(session=session, trigger=Turn.Trigger.TOOL, status=Turn.Status.RUNNING,
                                   message=f"{name} call", started_at=timezone.now())
        if not Session.objects.filter(pk=session.pk, active_turn__isnull=True).update(active_turn=turn):
            transaction.set_rollback(True)
            raise AdmissionError("session_busy", "a turn is running on this session; retry when it has settled", 409)
    row = ToolCall.objects.create(session=session, turn=turn, call_id=call_id, tool=name,
                                  input=validated.model_dump(mode="json"))
    duration = 0.0
    try:
        append_events(session.id, [("actions.requested", {"calls": [
            {"callId": call_id, "toolName": name, "input": row.input, "direct": True}]})], turn.id, hooks)
        if options.get("dryRun") and tool.effect == "write":
            calls_.stub(row, tool)
        else:
            info = SessionInfo(id=session.id, agent=session.agent.slug, mode=session.mode,
                               principal_id=session.principal_id, dry_run=bool(options.get("dryRun")))
            ctx = ToolContext(session=info, call_id=call_id, as_of=as_of, host=Host(session=session, agent=session.agent))
            duration = calls_.execute(row, tool, validated, ctx)
    finally:
        # Released whatever happened, or the session would stay locked.
        with transaction.atomic():
            if row.status in (ToolCall.Status.DONE, ToolCall.Status.FAILED):
                append_events(session.id, [("action.result", calls_.result_payload(row, duration))], turn.id, hooks)
            Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.COMPLETED, ended_at=timezone.now())
            Session.objects.filter(pk=session.pk, active_turn=turn).update(active_turn=None)
            dispatch_next(session.id)
    if row.status == ToolCall.Status.FAILED:
        raise AdmissionError("tool_error", row.error, 422)
    return calls_.result_payload(row, duration)
