"""Deterministic tool calls: one server tool, no model, optionally bound to a session.

A session-bound call takes the session's execution lock (its `active_turn`)
with the same conditional update a turn uses, so it never overlaps a turn:
while a turn runs the call gets 409 `session_busy`, and turns admitted while
the call runs queue behind it.

A `needs_approval` tool is never run directly without a decision, unless it
opts in with `@tool(direct_call=True)` or an operator approves the call
up front (`manage.py call --approve`). Without a session there is nobody to
ask, so the call is refused (403 `approval_required`); bound to a session it
parks like a turn's gated call: stored as awaiting approval, holding the
session's lock, and resumed by a worker once decided (`resume_call`).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from agents.definitions import Tool
from agents.discovery import LoadedAgent, load_deployment
from agents.mcp import SEPARATOR
from agents.models import Agent, Deployment
from agents.secrets.store import acting_for
from agents.workspaces.filesystems import VERBS
from sessions import tracing
from sessions.turn import extensions, lifecycle
from sessions.turn.admission import AdmissionError
from sessions.eventlog.events import append_events
from sessions.mcp.tools import find_mcp_tool
from sessions.models import EventType, Session, ToolCall, Turn
from sessions.plumbing.processes import process_id
from sessions.turn.runner import InterruptWatch
from sessions.turn.tools import (
    check_time_args,
    execute,
    execution_problem,
    json_safe,
    result_payload,
    stub_output,
    tool_context,
    validation_message,
)
from sessions.workspaces.store import WorkspaceUnavailable, open_workspace, sessionless_workspace

if TYPE_CHECKING:
    from sessions.principal import Principal


@dataclass(frozen=True)
class Finished:
    """A direct call that ran (or was stubbed): its output, or its error (`failed`: the tool raised).

    A tool that ran and raised is a completed call, as MCP answers a failed tool: the route
    answers 200 with `isError`, not a refusal; only input that never ran is refused.
    """

    call_id: str
    tool_name: str
    stubbed: bool
    duration_ms: float
    output: Any = None
    error: str | None = None
    ok: bool = True
    failed: bool = False

    @classmethod
    def of(cls, row: ToolCall, duration_ms: float) -> Finished:
        ok = row.status == ToolCall.Status.DONE
        return cls(call_id=row.call_id, tool_name=row.tool, stubbed=row.stubbed, duration_ms=round(duration_ms, 1),
                   output=row.output if ok else None, error=None if ok else row.error, ok=ok,
                   failed=row.status == ToolCall.Status.FAILED)


@dataclass(frozen=True)
class Parked:
    """A call bound to a session that waits for a decision (POST .../approvals/<call_id>)."""

    call_id: str
    tool_name: str
    input: Any
    session_id: str
    turn_id: str


def call_tool(agent: Agent, name: str, raw_input: Any, *, session: Session | None = None,
              approved_by: Principal | None = None, origin: dict[str, Any] | None = None,
              deployment: Deployment | None = None) -> dict[str, Any]:
    """`run_call`'s outcome as the SDK's `ctx.call_tool` and `manage.py call` give it: the tool route's body,
    except that a tool that raised raises here (AdmissionError `tool_error`), for the Python caller to handle."""
    outcome = run_call(agent, name, raw_input, session=session, approved_by=approved_by, origin=origin,
                       deployment=deployment)
    if isinstance(outcome, Finished) and outcome.failed:
        raise AdmissionError("tool_error", outcome.error or "the tool failed", 422)
    if isinstance(outcome, Parked):
        return {"callId": outcome.call_id, "toolName": outcome.tool_name, "input": outcome.input,
                "status": ToolCall.Status.AWAITING_APPROVAL, "sessionId": outcome.session_id,
                "turnId": outcome.turn_id}
    payload: dict[str, Any] = {"callId": outcome.call_id, "toolName": outcome.tool_name,
                               "durationMs": outcome.duration_ms, "stubbed": outcome.stubbed}
    if outcome.ok:
        payload["output"] = outcome.output
    else:
        payload["error"] = outcome.error
    return payload


def run_call(agent: Agent, name: str, raw_input: Any, *, session: Session | None = None,
             approved_by: Principal | None = None, origin: dict[str, Any] | None = None,
             deployment: Deployment | None = None) -> Finished | Parked:
    """Run one tool call, or park it for approval when bound to a session.

    `approved_by` is a principal approving the call in advance (the operator
    of `manage.py call --approve`). The tool reads the agent's credentials.
    `origin`: the agents' root and hops of the turn the caller acts for (a channel's handler of an
    agents' turn), passed on to what the tool starts (sessions.messaging.limits).
    `deployment`: the release to call without a session (a scratch copy of `manage.py call --dir`);
    the agent's active one by default.
    """
    with acting_for(agent.slug):
        return _run_call(agent, name, raw_input, session, approved_by, origin or {}, deployment)


def _run_call(agent: Agent, name: str, raw_input: Any, session: Session | None,
              approved_by: Principal | None, origin: dict[str, Any],
              deployment: Deployment | None = None) -> Finished | Parked:
    deployment = session.deployment if session else (deployment or agent.active_deployment)
    if deployment is None:
        raise AdmissionError("agent_not_deployed", f"agent {agent.slug!r} has no active deployment", 409)
    loaded = load_deployment(deployment)
    tool, family = find_tool(loaded, name, session)
    if tool is None:
        names = sorted(set(loaded.tools) | (loaded.workspace_tools() or set()))
        raise AdmissionError("tool_not_found", f"agent {agent.slug!r} has no tool {name!r}; tools: "
                             f"{', '.join(names) or 'none'}", 404)
    try:
        validated = tool.input_model.model_validate(raw_input)
    except ValidationError as exc:
        details = [{"field": ".".join(str(p) for p in e["loc"]) or "input", "message": e["msg"], "type": e["type"]}
                   for e in exc.errors(include_url=False, include_input=False)]
        raise AdmissionError("invalid_input", validation_message(exc), 400, details) from None
    if problem := execution_problem(name, tool):
        raise AdmissionError("execution_unavailable", problem, 422)
    gated = tool.needs_approval and not tool.direct_call and approved_by is None

    call_id = f"call_{uuid.uuid4().hex[:16]}"
    if session is None:
        if gated:
            raise AdmissionError("approval_required", (
                f"tool {name!r} needs approval: pass a sessionId to park the call until someone decides it "
                f"(POST /{agent.slug}/v1/session/<id>/approvals/<callId>), or declare the tool with "
                "@tool(..., direct_call=True) to allow direct calls"), 403)
        started = time.monotonic()
        try:
            output = json_safe(tool(validated, tool_context(None, call_id, agent, origin=origin)))
        except Exception as exc:
            return Finished(call_id=call_id, tool_name=name, stubbed=False, ok=False, failed=True,
                            error=f"{type(exc).__name__}: {exc}",
                            duration_ms=round((time.monotonic() - started) * 1000, 1))
        return Finished(call_id=call_id, tool_name=name, output=output, stubbed=False,
                        duration_ms=round((time.monotonic() - started) * 1000, 1))
    return _call_in_session(session, tool, name, validated, call_id, loaded.hooks, gated, approved_by, family,
                            origin)


def find_tool(loaded: LoadedAgent, name: str, session: Session | None) -> tuple[Tool | None, str]:
    """An agent tool by name, or a workspace tool bound to the session's workspace, with its family.

    Without a session only a fixed virtual filesystem has a workspace: a local
    one (or a per-session factory's) belongs to a session.
    """
    if name in loaded.tools:
        return loaded.tools[name], "server"
    if SEPARATOR in name:
        return find_mcp_tool(loaded.mcp, loaded.root, name, loaded.allowed_domains), "mcp"
    if name not in VERBS:
        return None, "server"
    try:
        workspace = open_workspace(session, loaded) if session is not None else sessionless_workspace(loaded)
    except WorkspaceUnavailable as exc:
        offered = loaded.workspace_tools()
        if offered is not None and name not in offered:
            return None, ""
        raise AdmissionError("workspace_unavailable", str(exc), 409) from None
    return workspace.tools().get(name), "workspace"


def _call_in_session(session: Session, tool: Tool, name: str, validated, call_id: str, hooks, gated: bool,
                     approved_by: Principal | None, family: str = "server",
                     origin: dict[str, Any] | None = None) -> Finished | Parked:
    options = session.run_options
    if options.as_of is not None and tool.time_args:
        if refusal := check_time_args(tool.time_args, validated, options.as_of):
            raise AdmissionError("invalid_input", refusal, 400)
    stubbed = options.dry_run and tool.effect == "write"
    parks = gated and not stubbed  # a stub has no effect, so it needs no approval (as in a turn)
    approved = tool.needs_approval and approved_by is not None and not stubbed
    requested = {"callId": call_id, "toolName": name, "input": json_safe(validated), "direct": True}
    if family in ("workspace", "mcp"):
        requested["family"] = family
    row_fields: dict[str, Any] = {"status": ToolCall.Status.REQUESTED}
    if parks:
        row_fields = {"status": ToolCall.Status.AWAITING_APPROVAL}
    elif stubbed:
        row_fields = {"status": ToolCall.Status.DONE, "stubbed": True, "output": stub_output(tool),
                      "ended_at": timezone.now()}
    elif approved:
        row_fields = {"status": ToolCall.Status.APPROVED, "decided_by": approved_by.as_dict(),
                      "reason": "approved when called"}
    with transaction.atomic():
        # Parked in the same transaction that takes the lock: a decision can never
        # find the call awaiting approval while its turn is not parked yet.
        turn = Turn(session=session, trigger=Turn.Trigger.TOOL, message=f"{name} call", origin=origin or {},
                    status=Turn.Status.AWAITING_APPROVAL if parks else Turn.Status.RUNNING,
                    claimed_by="" if parks else process_id(), started_at=timezone.now(), **tracing.link())
        if not lifecycle.lock_for_call(session, turn, parks=parks):
            transaction.set_rollback(True)
            raise AdmissionError("session_busy", "a turn is running on this session; retry when it has settled", 409)
        row = ToolCall.objects.create(session=session, turn=turn, call_id=call_id, tool=name,
                                      input=requested["input"], **row_fields)
        events: list[tuple[str, dict[str, Any]]] = [(EventType.ACTIONS_REQUESTED, {"calls": [requested]})]
        if parks:
            events.append((EventType.ACTION_APPROVAL_REQUESTED, {
                **requested, "description": tool.description, "effect": tool.effect}))
        elif approved:
            events.append((EventType.ACTION_APPROVAL_RESOLVED, {
                "callId": call_id, "toolName": name, "decision": ToolCall.Decision.APPROVE, "reason": row.reason,
                "decidedBy": row.decided_by}))
        append_events(session.id, events, turn.id, hooks)
    if parks:
        return Parked(call_id=call_id, tool_name=name, input=row.input, session_id=session.id, turn_id=turn.id)
    duration = 0.0
    try:
        if not stubbed:
            duration = execute(row, tool, validated, tool_context(session, call_id, turn_id=turn.id,
                                                                  should_stop=InterruptWatch(turn).should_stop))
    finally:
        # Released whatever happened, or the session would stay locked.
        _release(session, turn, row, duration, hooks, Turn.Status.COMPLETED)
    return Finished.of(row, duration)


def resume_call(turn: Turn) -> None:
    """Finish a parked direct call once it is decided, or its session stopped it (a worker task).

    1. An interrupt (stop, or a preempting follow-up) wins: the call is not run.
    2. Approved: the call runs, exactly once (`tools.execute` claims it).
    3. Denied: the denial is its result.
    Then the session's lock is released and its next queued turn dispatched.
    """
    session = turn.session
    row = ToolCall.objects.filter(turn=turn).first()
    hooks = session.hooks()
    duration, status = 0.0, Turn.Status.COMPLETED
    try:
        if row is None:
            return
        if row.status == ToolCall.Status.DENIED:
            row.explain_denial()
        if turn.interrupted():
            status = Turn.Status.INTERRUPTED
            row.abandon("not run: turn interrupted")
        elif row.status == ToolCall.Status.APPROVED:
            tool, _ = find_tool(load_deployment(session.deployment), row.tool, session)
            if tool is None:  # an MCP server that cannot be reached now
                row.fail(f"tool {row.tool!r} is not available now", expect=(ToolCall.Status.APPROVED,))
            else:
                validated = tool.input_model.model_validate(row.input)
                duration = execute(row, tool, validated, tool_context(session, row.call_id, turn_id=turn.id,
                                                                      should_stop=InterruptWatch(turn).should_stop))
    except Exception as exc:  # a bug must not leave the session locked, nor the call looking runnable
        row.fail(f"internal error: {type(exc).__name__}: {exc}", expect=(ToolCall.Status.APPROVED,))
        row.refresh_from_db()
        raise
    finally:
        _release(session, turn, row, duration, hooks, status)


def _release(session: Session, turn: Turn, row: ToolCall | None, duration: float, hooks, status: str) -> None:
    """Report the call's outcome, end its turn, free the session and start what queued behind it."""
    events = [(EventType.ACTION_RESULT, result_payload(row, duration))] if row and row.status in ToolCall.SETTLED else []
    lifecycle.release_call(session, turn, events, status, hooks)


def register() -> None:
    """A parked direct call's turn, once decided, runs the call instead of the agent's loop (sessions.apps)."""
    extensions.add_trigger(Turn.Trigger.TOOL, extensions.Trigger(run=resume_call))
