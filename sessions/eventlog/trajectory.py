"""The trajectory of a session: replies, tool calls and usage, read from its events; `transcript`, the same as text."""
from __future__ import annotations

import json
from typing import Any, Iterable

from sessions.models import EventType, Session, Turn
from sessions.turn.usage import add_usage, zero

SESSION_ENDINGS = {
    EventType.SESSION_WAITING: Session.Status.WAITING,
    EventType.SESSION_COMPLETED: Session.Status.COMPLETED,
    EventType.SESSION_FAILED: Session.Status.FAILED,
}


def fold_turn_outcome(turn: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
    """What an event says of its turn's state: parked, running again, or ended (status, usage, error, duration).

    The one reading of a turn's outcome from its events, shared by this trajectory and the playground's trace.
    """
    if kind == EventType.ACTION_APPROVAL_REQUESTED:
        turn["status"] = Turn.Status.AWAITING_APPROVAL
    elif kind == EventType.ACTION_APPROVAL_RESOLVED and turn["status"] == Turn.Status.AWAITING_APPROVAL:
        turn["status"] = Turn.Status.RUNNING
    elif kind in (EventType.TURN_COMPLETED, EventType.TURN_FAILED):
        turn["status"] = Turn.Status.COMPLETED if kind == EventType.TURN_COMPLETED else Turn.Status.FAILED
        turn["usage"] = data.get("usage", {})
        turn["durationMs"] = data.get("durationMs")
        if kind == EventType.TURN_FAILED:
            turn["error"] = data.get("error", turn["error"])


def build_trajectory(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Turns as the events tell them; a turn's and the total `usage` is None where unknown."""
    turns: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    session_id = status = None
    current: dict[str, Any] | None = None
    for event in events:
        session_id = event["sessionId"]
        kind, data = event["type"], event["data"]
        if kind == EventType.MESSAGE_RECEIVED:
            current = {"turnId": event["turnId"], "source": data.get("source"), "input": data.get("text"),
                       "reply": "", "reasoning": "", "toolCalls": [], "usage": {}, "status": Turn.Status.RUNNING,
                       "error": None}
            turns.append(current)
        elif current is None:
            status = SESSION_ENDINGS.get(kind, status)
            continue
        elif kind == EventType.MESSAGE_COMPLETED:
            current["reply"] = (current["reply"] + "\n\n" + data["text"]).strip() if current["reply"] else data["text"]
        elif kind == EventType.REASONING_COMPLETED:
            current["reasoning"] += data.get("text", "")
        elif kind == EventType.ACTIONS_REQUESTED and "subagent" not in data:
            for call in data.get("calls", []):
                entry = {"callId": call["callId"], "toolName": call["toolName"], "input": call.get("input")}
                by_call[call["callId"]] = entry
                current["toolCalls"].append(entry)
        elif kind == EventType.ACTION_RESULT:
            entry = by_call.get(data.get("callId"), {})
            for key in ("output", "error", "durationMs", "stubbed"):
                if key in data:
                    entry[key] = data[key]
        elif kind == EventType.ACTION_APPROVAL_REQUESTED:
            status = Session.Status.AWAITING_APPROVAL
            if event["turnId"] == current["turnId"]:  # (a parked direct call has a turn of its own)
                fold_turn_outcome(current, kind, data)
        elif kind == EventType.ACTION_APPROVAL_RESOLVED and status == Session.Status.AWAITING_APPROVAL:
            status = Session.Status.RUNNING
            fold_turn_outcome(current, kind, data)
        elif kind in (EventType.TURN_COMPLETED, EventType.TURN_FAILED):
            fold_turn_outcome(current, kind, data)
        status = SESSION_ENDINGS.get(kind, status)
    last = turns[-1] if turns else {}
    total: dict[str, int] | None = zero() if turns else {}
    for turn in turns:
        total = add_usage(total, turn["usage"])
    return {
        "sessionId": session_id,
        "status": status,
        "reply": last.get("reply", ""),
        "toolCalls": last.get("toolCalls", []),
        "usage": last.get("usage", {}),
        "error": last.get("error"),
        "totalUsage": total,
        "turns": turns,
    }


def transcript(trajectory: dict[str, Any], limit: int = 2000) -> str:
    """A trajectory as a person reads it: each turn's input, tool calls with their results, the reply,
    then the session's status. Long tool inputs and outputs are cut at `limit` characters."""
    lines: list[str] = []
    for turn in trajectory["turns"]:
        lines.append(f"> {turn['input'] or ''}")
        for call in turn["toolCalls"]:
            lines.append(f"  tool {call['toolName']} {_short(call.get('input'), limit)}")
            if "error" in call:
                lines.append(f"    error: {_short(call['error'], limit)}")
            elif "output" in call:
                stubbed = " (stubbed: dry run)" if call.get("stubbed") else ""
                lines.append(f"    -> {_short(call['output'], limit)}{stubbed}")
            else:
                lines.append("    (no result: awaiting approval)")
        if turn["reply"]:
            lines.append(turn["reply"])
        if turn["error"]:
            lines.append(f"error: {turn['error']}")
        lines.append("")
    usage = trajectory.get("totalUsage") or {}
    tokens = f", {usage.get('inputTokens', 0)} tokens in, {usage.get('outputTokens', 0)} out" if usage else ""
    lines.append(f"status: {trajectory['status']} (session {trajectory['sessionId']}{tokens})")
    return "\n".join(lines)


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"
