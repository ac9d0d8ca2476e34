"""The trajectory of a session: replies, tool calls and usage, read from its events."""
from __future__ import annotations

from typing import Any, Iterable


def build_trajectory(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    session_id = status = None
    current: dict[str, Any] | None = None
    for event in events:
        session_id = event["sessionId"]
        kind, data = event["type"], event["data"]
        if kind == "message.received":
            current = {"turnId": event["turnId"], "source": data.get("source"), "input": data.get("text"),
                       "reply": "", "reasoning": "", "toolCalls": [], "usage": {}, "status": "running", "error": None}
            turns.append(current)
        elif current is None:
            if kind in ("session.completed", "session.failed", "session.waiting"):
                status = kind.split(".", 1)[1]
            continue
        elif kind == "message.completed":
            current["reply"] = (current["reply"] + "\n\n" + data["text"]).strip() if current["reply"] else data["text"]
        elif kind == "reasoning.completed":
            current["reasoning"] += data.get("text", "")
        elif kind == "actions.requested":
            for call in data.get("calls", []):
                entry = {"callId": call["callId"], "toolName": call["toolName"], "input": call.get("input")}
                by_call[call["callId"]] = entry
                current["toolCalls"].append(entry)
        elif kind == "action.result":
            entry = by_call.get(data.get("callId"), {})
            for key in ("output", "error", "durationMs", "stubbed"):
                if key in data:
                    entry[key] = data[key]
        elif kind == "turn.completed":
            current.update(status="completed", usage=data.get("usage", {}), durationMs=data.get("durationMs"))
        elif kind == "turn.failed":
            current.update(status="failed", error=data.get("error"), usage=data.get("usage", {}), durationMs=data.get("durationMs"))
        if kind in ("session.completed", "session.failed", "session.waiting"):
            status = kind.split(".", 1)[1]
    last = turns[-1] if turns else {}
    total: dict[str, int] = {}
    for turn in turns:
        for key, value in turn["usage"].items():
            total[key] = total.get(key, 0) + value
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
